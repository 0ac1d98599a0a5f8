"""The paged KV pool: one contiguous float32 array of blocks with reference counts, and
per-sequence block tables (one per layer) that grow, shrink and read/write tokens.

A block with no reference is *free*. Free blocks come in two kinds: plain ones, and
*cached* ones the prefix cache still names (their bytes may be reused by a later
request). Allocation takes plain blocks first, lowest id first (fresh sequences get runs
of adjacent blocks, which lets a transport coalesce neighbouring ranges); when they run
out it asks the prefix cache to evict (``on_evict``), which picks among the cached free
blocks (``cached_free``, least recently freed first).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import numpy.typing as npt

from tandem.engines.base import KvCapacityError
from tandem.engines.reference.config import ReferenceModelConfig
from tandem.engines.reference.kv_layout import LayerBlocks, compute_block_span

Float32Array = npt.NDArray[np.float32]


class KvPool:
    """``num_kv_blocks`` blocks shaped ``[block_size, 2 (k, v), kv_heads, head_dim]``."""

    def __init__(self, config: ReferenceModelConfig) -> None:
        self.block_size = config.kv_block_size
        self.blocks = allocate_blocks(config)
        self._refs = [0] * config.num_kv_blocks
        self._cached = [False] * config.num_kv_blocks
        self._plain: list[int] = list(range(config.num_kv_blocks - 1, -1, -1))
        self._lru: OrderedDict[int, None] = OrderedDict()  # cached and free, oldest first
        # Called when allocation needs cached free blocks: the prefix cache drops at least
        # one entry with a free block (and calls ``uncache`` for its blocks).
        self.on_evict: Callable[[], None] = self._uncache_oldest

    @property
    def num_total(self) -> int:
        return int(self.blocks.shape[0])

    @property
    def num_free(self) -> int:
        """Blocks an allocation can get: plain free ones plus evictable cached ones."""
        return len(self._plain) + len(self._lru)

    @property
    def num_cached_free(self) -> int:
        return len(self._lru)

    def region(self) -> memoryview:
        return self.blocks.data.cast("B")

    def refs(self, block: int) -> int:
        return self._refs[block]

    def allocate(self, count: int) -> list[int]:
        if count > self.num_free:
            raise KvCapacityError(
                f"KV pool exhausted: need {count} blocks, {self.num_free} of {self.num_total} free"
            )
        while len(self._plain) < count:
            self.on_evict()
        taken = self._plain[len(self._plain) - count :]
        del self._plain[len(self._plain) - count :]
        taken.reverse()
        for block in taken:
            self._refs[block] = 1
        return taken

    def incref(self, block: int) -> None:
        if self._refs[block] == 0:
            # Only a cached block can be picked up again while free.
            assert self._cached[block], f"block {block} is free and not cached"
            del self._lru[block]
        self._refs[block] += 1

    def decref(self, blocks: Sequence[int]) -> None:
        """Drop one reference to each of ``blocks``, in order (the first to become free
        is the first a later allocation evicts)."""
        for block in blocks:
            self._refs[block] -= 1
            assert self._refs[block] >= 0, f"block {block} released twice"
            if self._refs[block]:
                continue
            if self._cached[block]:
                self._lru[block] = None
            else:
                self._plain.append(block)

    def mark_cached(self, block: int) -> None:
        self._cached[block] = True

    def uncache(self, blocks: Sequence[int]) -> None:
        """The prefix cache no longer names ``blocks``: free ones become plain free."""
        for block in blocks:
            if not self._cached[block]:
                continue
            self._cached[block] = False
            if self._refs[block] == 0:
                del self._lru[block]
                self._plain.append(block)

    def cached_free(self) -> Iterator[int]:
        """Cached free blocks, least recently freed first."""
        return iter(self._lru)

    def _uncache_oldest(self) -> None:
        self.uncache([next(iter(self._lru))])


def allocate_blocks(config: ReferenceModelConfig) -> Float32Array:
    """The pool's array, ``[blocks, block_size, 2 (k, v), kv_heads, head_dim]``."""
    blocks: Float32Array = np.empty(
        (config.num_kv_blocks, config.kv_block_size, 2, config.num_kv_heads, config.head_dim),
        dtype=np.float32,
    )
    # Written now, page by page, so the whole pool is resident from the start, as a
    # serving engine reserves its KV cache at start-up. Mapped lazily (np.zeros), each
    # page would cost memory at its first use instead: the prefix cache keeps freed
    # blocks, so the process would grow until the cache had filled the pool, minutes
    # or hours into serving, where a memory limit should be met at start-up.
    blocks.fill(0.0)
    return blocks


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

    def block(self, layer: int, logical: int) -> int | None:
        """Physical block holding logical block ``logical`` of ``layer`` (None: not held)."""
        table = self._tables[layer]
        if table.first <= logical < table.end:
            return table.physical[logical - table.first]
        return None

    def count_missing_blocks(self, layer: int, positions: range) -> int:
        span = compute_block_span(positions, self._pool.block_size)
        table = self._tables[layer]
        if not table.physical:
            return len(span)
        return max(0, span.stop - table.end)

    def adopt(self, layer: int, first: int, physical: Sequence[int]) -> None:
        """Start an empty table with shared blocks (a cached prefix): one more reference
        to each."""
        table = self._tables[layer]
        assert not table.physical, f"layer {layer} already holds blocks"
        for block in physical:
            self._pool.incref(block)
        table.first, table.physical = first, list(physical)

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
        """Let go of blocks that hold only positions before ``position``."""
        table = self._tables[layer]
        stale = min(len(table.physical), max(0, position // self._pool.block_size - table.first))
        if stale:
            self._pool.decref(table.physical[:stale])
            del table.physical[:stale]
            table.first += stale

    def release(self) -> None:
        """Let go of every block, the last logical block first, so that a cached prefix
        is evicted from its tail (a block is only useful after its parents)."""
        depth = max((t.end for t in self._tables), default=0)
        for logical in range(depth - 1, -1, -1):
            held = [
                b
                for layer in range(len(self._tables))
                if (b := self.block(layer, logical)) is not None
            ]
            self._pool.decref(held)
        for table in self._tables:
            table.physical = []
            table.first = 0

    def write(self, layer: int, start: int, keys: Float32Array, values: Float32Array) -> None:
        """Store K and V (``[tokens, kv_heads, head_dim]``) at positions ``start...``."""
        table = self._tables[layer]
        write_tokens(self._pool.blocks, table.first, table.physical, start, keys, values)

    def gather(self, layer: int, blocks: range, out: Float32Array) -> None:
        """Copy logical blocks ``blocks`` of ``layer`` into ``out``
        (``[len(blocks), block_size, 2, kv_heads, head_dim]``) in one gather; blocks the
        table does not hold come out zero. Stale bytes (slots after the last written
        position, positions a transfer did not write) are the caller's to mask."""
        table = self._tables[layer]
        gather_blocks(self._pool.blocks, table.first, table.physical, blocks, out)


def write_tokens(
    pool: Float32Array,
    first: int,
    physical: Sequence[int],
    start: int,
    keys: Float32Array,
    values: Float32Array,
) -> None:
    """K and V of positions ``start...`` into the blocks of one layer's table (logical
    block ``first + i`` in ``pool[physical[i]]``)."""
    size = pool.shape[1]
    positions = np.arange(start, start + keys.shape[0])
    block_ids = np.asarray(physical, dtype=np.int64)[positions // size - first]
    slots = positions % size
    pool[block_ids, slots, 0] = keys
    pool[block_ids, slots, 1] = values


def gather_blocks(
    pool: Float32Array, first: int, physical: Sequence[int], blocks: range, out: Float32Array
) -> None:
    """Logical ``blocks`` of one layer's table into ``out``, zero where it holds none."""
    low, high = max(blocks.start, first), min(blocks.stop, first + len(physical))
    if high <= low:
        out[...] = 0.0
        return
    out[: low - blocks.start] = 0.0
    out[high - blocks.start :] = 0.0
    np.take(
        pool,
        physical[low - first : high - first],
        axis=0,
        out=out[low - blocks.start : high - blocks.start],
        mode="clip",
    )
