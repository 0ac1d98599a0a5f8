"""The paged KV pool: one contiguous float32 array of blocks, a free list, and
per-sequence block tables (one per layer) that grow, shrink and read/write tokens."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tandem.engines.base import KvCapacityError
from tandem.engines.reference.config import ReferenceModelConfig
from tandem.engines.reference.kv_layout import LayerBlocks, compute_block_span

Float32Array = npt.NDArray[np.float32]


class KvPool:
    """``num_kv_blocks`` blocks shaped ``[block_size, 2 (k, v), kv_heads, head_dim]``.

    Blocks are handed out lowest id first so fresh sequences get runs of adjacent
    blocks, which lets a transport coalesce neighbouring ranges.
    """

    def __init__(self, config: ReferenceModelConfig) -> None:
        self.block_size = config.kv_block_size
        # np.zeros maps lazily: untouched blocks cost no resident memory.
        self.blocks: Float32Array = np.zeros(
            (config.num_kv_blocks, config.kv_block_size, 2, config.num_kv_heads, config.head_dim),
            dtype=np.float32,
        )
        self._free: list[int] = list(range(config.num_kv_blocks - 1, -1, -1))

    @property
    def num_total(self) -> int:
        return int(self.blocks.shape[0])

    @property
    def num_free(self) -> int:
        return len(self._free)

    def region(self) -> memoryview:
        return self.blocks.data.cast("B")

    def allocate(self, count: int) -> list[int]:
        if count > len(self._free):
            raise KvCapacityError(
                f"KV pool exhausted: need {count} blocks, {len(self._free)} of "
                f"{self.num_total} free"
            )
        taken = self._free[len(self._free) - count :]
        del self._free[len(self._free) - count :]
        taken.reverse()
        return taken

    def free(self, blocks: list[int]) -> None:
        self._free.extend(reversed(blocks))


class _LayerTable:
    __slots__ = ("first", "physical")

    def __init__(self) -> None:
        self.first = 0
        self.physical: list[int] = []

    @property
    def end(self) -> int:
        return self.first + len(self.physical)


class SequenceKv:
    """Block tables of one sequence, one per layer, over a shared pool."""

    def __init__(self, pool: KvPool, num_layers: int) -> None:
        self._pool = pool
        self._tables = [_LayerTable() for _ in range(num_layers)]

    @property
    def num_blocks(self) -> int:
        return sum(len(t.physical) for t in self._tables)

    def tables(self) -> list[LayerBlocks]:
        return [LayerBlocks(first=t.first, physical=tuple(t.physical)) for t in self._tables]

    def count_missing_blocks(self, layer: int, positions: range) -> int:
        span = compute_block_span(positions, self._pool.block_size)
        table = self._tables[layer]
        if not table.physical:
            return len(span)
        return max(0, span.stop - table.end)

    def cover(self, layer: int, positions: range) -> None:
        """Make sure ``positions`` have blocks. A table only ever grows at its end, except
        an empty one, which starts at the first block of ``positions``."""
        span = compute_block_span(positions, self._pool.block_size)
        table = self._tables[layer]
        if not span:
            return
        if not table.physical:
            table.first = span.start
        elif span.start < table.first:
            raise AssertionError(f"layer {layer}: positions {positions} precede kept blocks")
        missing = span.stop - table.end
        if missing > 0:
            table.physical.extend(self._pool.allocate(missing))

    def drop_before(self, layer: int, position: int) -> None:
        """Free blocks that hold only positions before ``position``."""
        table = self._tables[layer]
        stale = min(len(table.physical), max(0, position // self._pool.block_size - table.first))
        if stale:
            self._pool.free(table.physical[:stale])
            del table.physical[:stale]
            table.first += stale

    def release(self) -> None:
        for table in self._tables:
            self._pool.free(table.physical)
            table.physical = []
            table.first = 0

    def write(self, layer: int, start: int, keys: Float32Array, values: Float32Array) -> None:
        """Store K and V (``[tokens, kv_heads, head_dim]``) at positions ``start...``."""
        positions = np.arange(start, start + keys.shape[0])
        block_ids, slots = self._locate(layer, positions)
        self._pool.blocks[block_ids, slots, 0] = keys
        self._pool.blocks[block_ids, slots, 1] = values

    def read(self, layer: int, positions: range) -> tuple[Float32Array, Float32Array]:
        """K and V of ``positions`` as ``[tokens, kv_heads, head_dim]``, valid until the
        next write (they may be views of the pool). Covers exactly ``positions``, so
        stale bytes in partial blocks never leak in."""
        size = self._pool.block_size
        table = self._tables[layer]
        span = compute_block_span(positions, size)
        if span.start < table.first or span.stop > table.end:
            raise AssertionError(f"layer {layer}: positions {positions} are not cached")
        physical = table.physical[span.start - table.first : span.stop - table.first]
        if physical == list(range(physical[0], physical[0] + len(physical))):
            gathered = self._pool.blocks[physical[0] : physical[-1] + 1]
        else:
            gathered = self._pool.blocks[physical]
        flat = gathered.reshape(-1, *gathered.shape[2:])
        offset = positions.start - span.start * size
        tokens = flat[offset : offset + len(positions)]
        return tokens[:, 0], tokens[:, 1]

    def _locate(
        self, layer: int, positions: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        size = self._pool.block_size
        table = self._tables[layer]
        physical = np.asarray(table.physical, dtype=np.int64)
        return physical[positions // size - table.first], positions % size
