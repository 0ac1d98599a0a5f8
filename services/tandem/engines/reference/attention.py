"""Rotary embeddings and grouped-query attention whose result for a query depends only on
that query's position, its vector and the keys it may see.

That is what lets a token be computed in any prefill chunk, in a decode step or in any
batch and come out bit-identical (see ``linear.py`` for why BLAS shapes matter). So:

- queries go in groups of ``QUERY_GROUP`` consecutive absolute positions (group ``i``
  holds positions ``[4i, 4i + 4)``, missing ones zero), keys in tiles of ``tile``
  absolute positions (tile ``j`` holds ``[j*tile, (j+1)*tile)``, missing ones zero): every
  BLAS call has the shape ``[QUERY_GROUP * group, d] @ [d, tile]`` (and back), and a
  query always sits in the same row of it (window layers use tiles of at most
  ``window`` keys);
- masked scores are set (never added) to -inf, so keys a query does not see contribute an
  exact 0, and tiles it does not see at all add exact zeros;
- softmax is two-pass: the row maximum over every tile (exact, order-free), then per-tile
  sums of fixed length, accumulated tile by tile in position order (``cumsum``, a
  sequential sum), so leading and trailing all-zero tiles change nothing.

Memory per call is bounded by blocks of ``_GROUPS_PER_BLOCK`` query groups against the
tiles they can see: a 32k prefill never builds a 32k x 32k score matrix.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Float32Array = npt.NDArray[np.float32]

QUERY_GROUP = 4
_GROUPS_PER_BLOCK = 16  # 64 queries per block of work


def compute_rope(
    positions: range, head_dim: int, theta: float
) -> tuple[Float32Array, Float32Array]:
    """cos and sin tables ``[tokens, head_dim / 2]`` for absolute ``positions``.
    Angles are computed in float64 from the absolute position so a token's rotation
    never depends on how the sequence was chunked."""
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.arange(positions.start, positions.stop, dtype=np.float64)[:, None] * inv_freq
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def apply_rope(
    x: Float32Array, cos: Float32Array, sin: Float32Array, pairing: str = "halves"
) -> Float32Array:
    """Rotate ``x`` (``[tokens, heads, head_dim]``). Frequency i rotates the pair
    (i, i + d/2) with ``pairing="halves"`` (Hugging Face's layout) or (2i, 2i + 1) with
    ``"adjacent"`` (GGUF: llama.cpp permutes Q/K rows so that this pairing reproduces the
    original model)."""
    c, s = cos[:, None, :], sin[:, None, :]
    if pairing == "adjacent":
        even, odd = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = even * c - odd * s
        out[..., 1::2] = odd * c + even * s
        return out
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    return np.concatenate((first * c - second * s, second * c + first * s), axis=-1)


def layer_tile(tile: int, window: int | None) -> int:
    """Keys per tile in a layer: a window layer's block of queries sees ~2 windows of
    keys, so its tiles are at most a window."""
    return tile if window is None else min(tile, window)


def tile_span(first_key: int, stop: int, tile: int) -> tuple[int, int]:
    """``(origin, tiles)``: the tiles holding positions ``[first_key, stop)``."""
    first_tile = first_key // tile
    return first_tile * tile, -(-stop // tile) - first_tile


def attend(
    queries: Float32Array,
    query_start: int,
    keys: Float32Array,
    values: Float32Array,
    key_start: int,
    *,
    window: int | None,
    tile: int,
) -> Float32Array:
    """Causal grouped-query attention of one sequence's run of queries.

    ``queries`` ``[Q, heads, d]`` sit at positions ``query_start...``; ``keys`` and
    ``values`` ``[K, kv_heads, d]`` at ``key_start...`` and must include every key a
    query may see, up to the last query. Query head h reads KV head
    ``h // (heads // kv_heads)``. A query at position p sees keys in ``(p - window, p]``
    (``window=None``: ``[0, p]``). Returns ``[Q, heads, d]``.
    """
    stop = query_start + queries.shape[0]
    if key_start + keys.shape[0] != stop:
        raise ValueError("keys must run up to the last query")
    tile = layer_tile(tile, window)
    origin, tiles = tile_span(key_start, stop, tile)
    padded_k = np.zeros((tiles * tile, *keys.shape[1:]), dtype=np.float32)
    padded_v = np.zeros_like(padded_k)
    padded_k[key_start - origin : stop - origin] = keys
    padded_v[key_start - origin : stop - origin] = values
    return attend_tiled(queries, query_start, padded_k, padded_v, origin, window=window, tile=tile)


def attend_tiled(
    queries: Float32Array,
    query_start: int,
    keys: Float32Array,
    values: Float32Array,
    origin: int,
    *,
    window: int | None,
    tile: int,
) -> Float32Array:
    """``attend`` with the keys already laid out in tiles: ``keys``/``values``
    ``[tiles * tile, kv_heads, d]`` hold positions ``origin...`` (``origin`` and
    ``tile`` from ``tile_span``/``layer_tile``), zero where there is no key, in any
    layout where each ``[tile, d]`` slice has unit stride along d (a view of the KV
    pool's token-major blocks is fine)."""
    num_queries, heads, dim = queries.shape
    kv_heads = keys.shape[1]
    group = heads // kv_heads
    query_stop = query_start + num_queries
    tiles = keys.shape[0] // tile
    first_tile = origin // tile
    padded_start = (query_start // QUERY_GROUP) * QUERY_GROUP
    groups = -(-query_stop // QUERY_GROUP) - padded_start // QUERY_GROUP
    grouped = _group_queries(queries, query_start - padded_start, groups, kv_heads)
    keys_t, values_t = _as_tiles(keys[None], tile), _as_tiles(values[None], tile)
    out = np.empty((kv_heads, groups, QUERY_GROUP * group, dim), dtype=np.float32)
    for begin in range(0, groups, _GROUPS_PER_BLOCK):
        end = min(groups, begin + _GROUPS_PER_BLOCK)
        low = padded_start + begin * QUERY_GROUP
        high = padded_start + end * QUERY_GROUP  # exclusive
        seen_from = 0 if window is None else max(0, low - window + 1)
        tile_lo = max(0, seen_from // tile - first_tile)
        tile_hi = min(tiles, (high - 1) // tile - first_tile + 1)
        query_pos = np.arange(low, high).reshape(end - begin, 1, QUERY_GROUP, 1)
        key_pos = (first_tile + tile_lo) * tile + np.arange((tile_hi - tile_lo) * tile)
        out[:, begin:end] = _attend_block(
            grouped[:, begin:end],
            np.repeat(query_pos, group, axis=2),
            keys_t[:, :, tile_lo:tile_hi],
            values_t[:, :, tile_lo:tile_hi],
            key_pos.reshape(1, tile_hi - tile_lo, 1, tile),
            window,
        )
    # [kv, groups, QUERY_GROUP, group, d] -> [positions, heads, d]
    result = out.reshape(kv_heads, groups, QUERY_GROUP, group, dim).transpose(1, 2, 0, 3, 4)
    flat = result.reshape(groups * QUERY_GROUP, heads, dim)
    return np.ascontiguousarray(flat[query_start - padded_start : query_stop - padded_start])


def attend_rows(
    queries: Float32Array,
    positions: Sequence[int],
    keys: Float32Array,
    values: Float32Array,
    origins: Sequence[int],
    *,
    window: int | None,
    tile: int,
) -> Float32Array:
    """One query per sequence (decode rows), every sequence in one set of BLAS calls.

    ``queries[i]`` (``[n, heads, d]``) sits at ``positions[i]``; ``keys[i]`` /
    ``values[i]`` (``[n, tiles * tile, kv_heads, d]``, laid out as for
    ``attend_tiled``) hold its keys from ``origins[i]`` on, zero where there is none
    (including tiles beyond its own). Each row is computed exactly as ``attend``
    computes it alone: the same group and tile shapes, and all-masked zero tiles change
    nothing."""
    count, heads, dim = queries.shape
    kv_heads = keys.shape[2]
    group = heads // kv_heads
    tiles = keys.shape[1] // tile
    slots = [p % QUERY_GROUP for p in positions]
    grouped = np.zeros((kv_heads, count, 1, QUERY_GROUP * group, dim), dtype=np.float32)
    scaled = (queries * np.float32(1.0 / np.sqrt(dim))).reshape(count, kv_heads, group, dim)
    for i, slot in enumerate(slots):
        grouped[:, i, 0, slot * group : (slot + 1) * group] = scaled[i]
    starts = np.asarray(positions) - np.asarray(slots)
    query_pos = np.repeat(
        (starts[:, None] + np.arange(QUERY_GROUP)).reshape(count, 1, QUERY_GROUP, 1), group, axis=2
    )
    key_pos = np.asarray(origins)[:, None] + np.arange(tiles * tile)
    out = _attend_block(
        grouped,
        query_pos,
        _as_tiles(keys, tile),
        _as_tiles(values, tile),
        key_pos.reshape(count, tiles, 1, tile),
        window,
    )  # [kv, count, QUERY_GROUP * group, d]
    picked = np.stack([out[:, i, s * group : (s + 1) * group] for i, s in enumerate(slots)])
    return np.ascontiguousarray(picked.reshape(count, heads, dim))


def _group_queries(queries: Float32Array, offset: int, groups: int, kv_heads: int) -> Float32Array:
    """``[Q, heads, d]`` (the first at ``offset`` in its group) as
    ``[kv, groups, 1, QUERY_GROUP * group, d]``, scaled by 1/sqrt(d), zero-padded."""
    count, heads, dim = queries.shape
    group = heads // kv_heads
    grouped = np.zeros((groups * QUERY_GROUP, kv_heads, group, dim), dtype=np.float32)
    grouped[offset : offset + count] = (queries * np.float32(1.0 / np.sqrt(dim))).reshape(
        count, kv_heads, group, dim
    )
    shaped = grouped.reshape(groups, QUERY_GROUP, kv_heads, group, dim).transpose(2, 0, 1, 3, 4)
    return np.ascontiguousarray(shaped).reshape(kv_heads, groups, 1, QUERY_GROUP * group, dim)


def _as_tiles(padded: Float32Array, tile: int) -> Float32Array:
    """``[G, T * tile, kv, d]`` (token-major, as the KV pool stores it) seen as
    ``[kv, G, T, tile, d]`` without a copy: each ``[tile, d]`` matrix has unit stride
    along d and evenly spaced rows, which BLAS reads in place (a transposing copy of a
    long context would cost more than the attention's arithmetic)."""
    groups, positions, kv_heads, dim = padded.shape
    shaped = padded.reshape(groups, positions // tile, tile, kv_heads, dim)
    tiles: Float32Array = shaped.transpose(3, 0, 1, 2, 4)
    return tiles


def _attend_block(
    queries: Float32Array,
    query_pos: npt.NDArray[np.int64],
    keys_t: Float32Array,
    values: Float32Array,
    key_pos: npt.NDArray[np.int64],
    window: int | None,
) -> Float32Array:
    """Queries ``[kv, G, 1, R, d]`` (positions ``query_pos`` ``[G, 1, R, 1]``) against
    key and value tiles ``[kv, G or 1, T, tile, d]`` (positions ``key_pos``
    ``[G or 1, T, 1, tile]``); returns ``[kv, G, R, d]``."""
    # [kv, G, T, tile, R]: keys as the left operand, read in place; then made contiguous
    # with tiles last, so every reduction below runs along a contiguous row.
    scores = np.ascontiguousarray(np.matmul(keys_t, queries.swapaxes(-1, -2)).swapaxes(-1, -2))
    visible = key_pos <= query_pos
    if window is not None:
        visible &= key_pos > query_pos - window
    if not visible.all():  # where(True, s, -inf) is s: skipping it changes no bit
        scores = np.where(visible[None], scores, np.float32(-np.inf))
    peak = scores.max(axis=(2, 4), keepdims=True)
    # Padding rows (positions with no query) may see nothing: shift them by 0.
    peak = np.where(np.isfinite(peak), peak, np.float32(0.0))
    weights = np.exp(scores - peak)
    totals = np.cumsum(weights.sum(axis=-1, keepdims=True), axis=2)[:, :, -1]
    mixed = np.cumsum(np.matmul(weights, values), axis=2)[:, :, -1]
    totals = np.where(totals > 0, totals, np.float32(1.0))
    result: Float32Array = (mixed / totals).astype(np.float32, copy=False)
    return result
