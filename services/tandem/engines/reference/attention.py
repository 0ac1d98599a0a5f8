"""Rotary embeddings and grouped-query attention over a bounded key range.

Attention walks the keys in tiles with an online softmax (running max and sum per
query), so memory is ``queries x tile`` per head however long the context is: a 32k
prefill never builds a 32k x 32k score matrix.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Float32Array = npt.NDArray[np.float32]

_COPY_KV_FROM_QUERIES = 64


def compute_rope(
    positions: range, head_dim: int, theta: float
) -> tuple[Float32Array, Float32Array]:
    """cos and sin tables ``[tokens, head_dim / 2]`` for absolute ``positions``.
    Angles are computed in float64 from the absolute position so a token's rotation
    never depends on how the sequence was chunked."""
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.arange(positions.start, positions.stop, dtype=np.float64)[:, None] * inv_freq
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def apply_rope(x: Float32Array, cos: Float32Array, sin: Float32Array) -> Float32Array:
    """Rotate ``x`` (``[tokens, heads, head_dim]``) pairing dimension i with i + d/2."""
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return np.concatenate((first * c - second * s, second * c + first * s), axis=-1)


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
    """Causal grouped-query attention.

    ``queries`` ``[Q, heads, d]`` sit at positions ``query_start...``; ``keys`` and
    ``values`` ``[K, kv_heads, d]`` at ``key_start...`` and must include every key a
    query may see. Query head h reads KV head ``h // (heads // kv_heads)``. A query at
    position p sees keys in ``(p - window, p]`` (``window=None``: ``[0, p]``).
    Returns ``[Q, heads, d]``. Queries go in blocks (``window`` rows for window layers,
    so a block only scans ~2 windows of keys), keys in tiles of ``tile``.
    """
    num_queries, heads, dim = queries.shape
    kv_heads = keys.shape[1]
    group = heads // kv_heads
    scaled = queries * np.float32(1.0 / np.sqrt(dim))
    # [kv_heads, group, Q, d]: each KV head's query rows, contiguous per group member.
    grouped = np.ascontiguousarray(
        scaled.reshape(num_queries, kv_heads, group, dim).transpose(1, 2, 0, 3)
    )
    # [kv_heads, d, K] and [kv_heads, K, d], unit stride along d so BLAS reads them in
    # place. A decode step reads them as views (a transposing copy of a long context
    # costs more than its arithmetic); a prefill chunk reuses each key for many
    # queries, so a contiguous copy pays for itself.
    keys_t = keys.transpose(1, 2, 0)
    values_t = values.transpose(1, 0, 2)
    if num_queries >= _COPY_KV_FROM_QUERIES:
        keys_t, values_t = np.ascontiguousarray(keys_t), np.ascontiguousarray(values_t)
    out = np.empty_like(grouped)
    block = tile if window is None else max(1, min(tile, window))
    for first in range(0, num_queries, block):
        rows = range(first, min(num_queries, first + block))
        begin = query_start + rows.start
        low = key_start if window is None else max(key_start, begin - window + 1)
        high = query_start + rows.stop  # causal: nothing after the last query
        out[:, :, rows.start : rows.stop] = _attend_block(
            grouped[:, :, rows.start : rows.stop],
            begin,
            keys_t[:, :, low - key_start : high - key_start],
            values_t[:, low - key_start : high - key_start],
            low,
            window=window,
            tile=tile,
        )
    result: Float32Array = np.ascontiguousarray(out.transpose(2, 0, 1, 3)).reshape(
        num_queries, heads, dim
    )
    return result


def _attend_block(
    queries: Float32Array,
    query_start: int,
    keys_t: Float32Array,
    values: Float32Array,
    key_start: int,
    *,
    window: int | None,
    tile: int,
) -> Float32Array:
    """Online-softmax attention of ``queries`` ``[kv, g, Q, d]`` over ``keys_t``
    ``[kv, d, K]`` / ``values`` ``[kv, K, d]``; returns ``[kv, g, Q, d]``."""
    kv_heads, group, num_queries, dim = queries.shape
    flat = queries.reshape(kv_heads, group * num_queries, dim)
    query_pos = np.arange(query_start, query_start + num_queries)
    query_last = query_start + num_queries - 1
    running_max = np.full((kv_heads, group * num_queries, 1), -np.inf, dtype=np.float32)
    running_sum = np.zeros((kv_heads, group * num_queries, 1), dtype=np.float32)
    acc = np.zeros((kv_heads, group * num_queries, dim), dtype=np.float32)
    num_keys = keys_t.shape[-1]
    for tile_start in range(0, num_keys, tile):
        tile_stop = min(num_keys, tile_start + tile)
        scores = np.matmul(flat, keys_t[:, :, tile_start:tile_stop])  # [kv, g*Q, T]
        first_key, last_key = key_start + tile_start, key_start + tile_stop - 1
        fully_visible = last_key <= query_start and (
            window is None or first_key > query_last - window
        )
        if not fully_visible:
            key_pos = np.arange(first_key, last_key + 1)
            hidden = key_pos[None, :] > query_pos[:, None]
            if window is not None:
                hidden |= key_pos[None, :] <= query_pos[:, None] - window
            bias = np.where(hidden, np.float32(-np.inf), np.float32(0.0))
            scores.reshape(kv_heads, group, num_queries, -1)[...] += bias
        tile_max = np.maximum(running_max, scores.max(axis=-1, keepdims=True))
        # Rows that have seen no visible key yet keep -inf; shift them by 0 instead.
        shift = np.where(np.isfinite(tile_max), tile_max, np.float32(0.0))
        np.subtract(scores, shift, out=scores)
        np.exp(scores, out=scores)
        correction = np.exp(running_max - shift)
        running_sum = running_sum * correction + scores.sum(axis=-1, keepdims=True)
        acc = acc * correction + np.matmul(scores, values[:, tile_start:tile_stop])
        running_max = tile_max
    result = (acc / running_sum).astype(np.float32, copy=False)
    shaped: Float32Array = result.reshape(kv_heads, group, num_queries, dim)
    return shaped
