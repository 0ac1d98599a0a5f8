"""Pure KV arithmetic: which tokens each layer keeps, how many bytes and blocks that is.

Block ``j`` of a layer always holds absolute positions ``[j*B, (j+1)*B)`` (B = block
size), token-major inside the block (``[B, 2, kv_heads, head_dim]``), so any run of
consecutive tokens inside one block is one contiguous byte range, and two engines with
the same block size split a sequence into the same ranges whatever physical blocks
they use.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tandem.engines.base import KvLayout, KvRange
from tandem.engines.reference.config import ReferenceModelConfig


@dataclass(frozen=True, slots=True)
class LayerBlocks:
    """A read-only view of one layer's block table: logical block ``first + i`` lives
    in physical block ``physical[i]``."""

    first: int
    physical: Sequence[int]


def compute_kept_range(config: ReferenceModelConfig, layer: int, num_tokens: int) -> range:
    """Positions whose KV a layer keeps once ``num_tokens`` tokens are cached: all of
    them for full attention, the last ``sliding_window`` for window layers."""
    if config.is_sliding(layer):
        return range(max(0, num_tokens - config.sliding_window), num_tokens)
    return range(num_tokens)


def compute_kv_bytes(config: ReferenceModelConfig, num_tokens: int) -> int:
    """Analytical KV bytes of a sequence of ``num_tokens`` cached tokens (what a
    handoff moves): per layer, tokens kept x 2 x kv_heads x head_dim x 4 bytes."""
    kept = sum(
        len(compute_kept_range(config, layer, num_tokens)) for layer in range(config.num_layers)
    )
    return kept * config.kv_token_bytes


def compute_block_span(positions: range, block_size: int) -> range:
    """Logical blocks that hold any of ``positions``."""
    if not positions:
        return range(0)
    return range(positions.start // block_size, (positions.stop - 1) // block_size + 1)


def compute_kept_blocks(config: ReferenceModelConfig, layer: int, num_tokens: int) -> range:
    return compute_block_span(compute_kept_range(config, layer, num_tokens), config.kv_block_size)


def compute_prefill_peak_blocks(config: ReferenceModelConfig, num_tokens: int) -> int:
    """Most blocks a prefill of ``num_tokens`` holds at once, however it is cut into
    chunks (of at most ``max_batch_tokens`` or ``prefill_chunk`` tokens): while a chunk
    ``[s, e)`` runs, a full layer holds ``[0, e)`` and a window layer ``[s - window, e)``
    (before trimming)."""
    chunk = max(config.max_batch_tokens, config.prefill_chunk)
    peak = 0
    # The window span's block count repeats with the alignment of e: the last
    # kv_block_size ends cover every alignment (and e = num_tokens holds the most blocks
    # of full layers).
    for end in range(max(1, num_tokens - config.kv_block_size + 1), num_tokens + 1):
        held = 0
        for layer in range(config.num_layers):
            window = config.window_of(layer)
            first = 0 if window is None else max(0, end - chunk - window)
            held += len(compute_block_span(range(first, end), config.kv_block_size))
        peak = max(peak, held)
    return peak


def build_kv_layout(
    config: ReferenceModelConfig,
    num_tokens: int,
    tables: Sequence[LayerBlocks],
    region: int = 0,
) -> KvLayout:
    """Byte ranges of the kept tokens, layer by layer, one range per (layer, block), in
    ``region`` (a pool of ``config``'s blocks)."""
    block_size, token_bytes = config.kv_block_size, config.kv_token_bytes
    ranges: list[KvRange] = []
    for layer, block, physical in _kept_blocks(config, num_tokens, tables):
        kept = compute_kept_range(config, layer, num_tokens)
        begin = max(kept.start, block * block_size)
        end = min(kept.stop, (block + 1) * block_size)
        offset = physical * config.kv_block_bytes + (begin - block * block_size) * token_bytes
        ranges.append(KvRange(region=region, offset=offset, length=(end - begin) * token_bytes))
    return KvLayout(num_tokens=num_tokens, ranges=tuple(ranges))


def list_kept_physical_blocks(
    config: ReferenceModelConfig, num_tokens: int, tables: Sequence[LayerBlocks]
) -> list[int]:
    """The physical blocks ``build_kv_layout``'s ranges lie in, each once, ascending."""
    return sorted({physical for _, _, physical in _kept_blocks(config, num_tokens, tables)})


def _kept_blocks(
    config: ReferenceModelConfig, num_tokens: int, tables: Sequence[LayerBlocks]
) -> Iterator[tuple[int, int, int]]:
    """(layer, logical block, physical block) of every block holding kept tokens."""
    for layer, table in enumerate(tables):
        for block in compute_kept_blocks(config, layer, num_tokens):
            yield layer, block, table.physical[block - table.first]
