"""The reference transformer's forward pass over one engine step: every sequence's new
tokens (a decode row, or a chunk of a prefill) in one batch.

Pre-norm blocks: RMSNorm -> GQA attention with RoPE (sliding window on the layers the
config says) -> residual; RMSNorm -> SwiGLU MLP or top-k mixture of experts -> residual.
Projections run over the rows of all sequences at once (``Linear``: one BLAS shape, so a
row never depends on its neighbours); attention runs over each sequence's own KV (decode
rows of all sequences together, prefill chunks one by one), which goes through a
``KvStore`` so the model never sees blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from tandem.engines.reference.attention import (
    apply_rope,
    attend_rows,
    attend_tiled,
    compute_rope,
    layer_tile,
    tile_span,
)
from tandem.engines.reference.config import ReferenceModelConfig
from tandem.engines.reference.weights import LayerWeights, ModelWeights, init_weights

Float32Array = npt.NDArray[np.float32]
# Adds a rank's partial sum to those of the other ranks of a tensor-parallel group.
Reduce = Callable[[Float32Array], Float32Array]


class KvStore(Protocol):
    def write(self, layer: int, start: int, keys: Float32Array, values: Float32Array) -> None:
        """Store K and V (``[tokens, kv_heads, head_dim]``) at positions ``start...``."""
        ...

    def gather(self, layer: int, blocks: range, out: Float32Array) -> None:
        """Logical KV blocks ``blocks`` of ``layer`` into ``out`` ``[len(blocks),
        block_size, 2, kv_heads, head_dim]``; blocks not held come out zero."""
        ...


@dataclass(frozen=True, slots=True)
class Segment:
    """``tokens`` of one sequence at positions ``start...``; every earlier position its
    layers need is already in ``kv``, and blocks for the new ones are allocated."""

    tokens: Sequence[int]
    start: int
    kv: KvStore
    wants_logits: bool = True  # return the logits of its last token


class ReferenceModel:
    """The whole model, or one rank's shard of it (``tp.shard``): then ``config`` and
    ``weights`` are the shard's and ``reduce`` sums each residual branch across ranks."""

    def __init__(
        self,
        config: ReferenceModelConfig,
        weights: ModelWeights | None = None,
        reduce: Reduce | None = None,
    ) -> None:
        self.config = config
        self.weights: ModelWeights = weights if weights is not None else init_weights(config)
        self._reduce: Reduce = reduce if reduce is not None else _whole

    def forward(self, tokens: Sequence[int], start: int, kv: KvStore) -> Float32Array:
        """One sequence alone: the logits ``[vocab]`` of its last token."""
        logits: Float32Array = self.forward_batch([Segment(tokens, start, kv)])[0]
        return logits

    def forward_batch(self, segments: Sequence[Segment]) -> Float32Array:
        """Writes every segment's KV; returns ``[segments wanting logits, vocab]``."""
        bounds = np.cumsum([0, *(len(s.tokens) for s in segments)])
        hidden = self.run_layers(segments, bounds)
        last = [int(bounds[i + 1]) - 1 for i, s in enumerate(segments) if s.wants_logits]
        if not last:
            return np.zeros((0, self.config.vocab_size), dtype=np.float32)
        final = _rms_norm(hidden[last], self.weights.final_norm, self.config)
        logits: Float32Array = self.weights.unembedding(final)
        return logits

    def run_layers(
        self, segments: Sequence[Segment], bounds: npt.NDArray[np.int64]
    ) -> Float32Array:
        """Writes every segment's KV; returns the last layer's hidden states (all a
        follower rank computes: the leader alone turns them into logits)."""
        tokens = [t for segment in segments for t in segment.tokens]
        hidden = self.weights.embed(tokens)
        reduce = self._reduce
        for layer, weights in enumerate(self.weights.layers):
            normed = _rms_norm(hidden, weights.attn_norm, self.config)
            attended = self._attention(layer, weights, normed, segments, bounds)
            hidden = hidden + reduce(weights.out(attended))
            normed = _rms_norm(hidden, weights.mlp_norm, self.config)
            hidden = hidden + reduce(self._mlp(weights, normed))
        return hidden

    def _attention(
        self,
        layer: int,
        weights: LayerWeights,
        normed: Float32Array,
        segments: Sequence[Segment],
        bounds: npt.NDArray[np.int64],
    ) -> Float32Array:
        config = self.config
        heads, kv_heads, dim = config.num_heads, config.num_kv_heads, config.head_dim
        window = config.window_of(layer)
        tile = layer_tile(config.attention_tile, window)
        qkv = weights.qkv(normed)
        out = np.empty((normed.shape[0], heads * dim), dtype=np.float32)
        rows: list[tuple[int, Float32Array, range]] = []  # one-token segments, together
        for index, segment in enumerate(segments):
            span = slice(int(bounds[index]), int(bounds[index + 1]))
            count = span.stop - span.start
            positions = range(segment.start, segment.start + count)
            cos, sin = compute_rope(positions, dim, config.rope_theta)
            part = qkv[span]
            queries = apply_rope(
                part[:, : heads * dim].reshape(count, heads, dim), cos, sin, config.rope_pairing
            )
            keys = apply_rope(
                part[:, heads * dim : (heads + kv_heads) * dim].reshape(count, kv_heads, dim),
                cos,
                sin,
                config.rope_pairing,
            )
            values = part[:, (heads + kv_heads) * dim :].reshape(count, kv_heads, dim)
            segment.kv.write(layer, positions.start, keys, values)
            first_key = 0 if window is None else max(0, positions.start - window + 1)
            seen = range(first_key, positions.stop)
            if count == 1:
                rows.append((index, queries[0], seen))
                continue
            origin, tiles = tile_span(first_key, positions.stop, tile)
            kv = self._gather(segment.kv, layer, seen, origin, tiles * tile)
            attended = attend_tiled(
                queries, positions.start, kv[:, 0], kv[:, 1], origin, window=window, tile=tile
            )
            out[span] = attended.reshape(count, heads * dim)
        if rows:
            spans = [tile_span(seen.start, seen.stop, tile) for _, _, seen in rows]
            width = max(tiles for _, tiles in spans) * tile
            kv_rows = np.stack(
                [
                    self._gather(segments[index].kv, layer, seen, origin, width)
                    for (index, _, seen), (origin, _) in zip(rows, spans, strict=True)
                ]
            )
            attended = attend_rows(
                np.stack([query for _, query, _ in rows]),
                [seen.stop - 1 for _, _, seen in rows],
                kv_rows[:, :, 0],
                kv_rows[:, :, 1],
                [origin for origin, _ in spans],
                window=window,
                tile=tile,
            )
            out[bounds[[index for index, _, _ in rows]]] = attended.reshape(len(rows), heads * dim)
        return out

    def _gather(
        self, kv: KvStore, layer: int, seen: range, origin: int, width: int
    ) -> Float32Array:
        """Positions ``[origin, origin + width)`` of ``layer`` as ``[width, 2, kv, d]``,
        zero outside ``seen`` (stale slots and dropped blocks never leak in)."""
        config = self.config
        block = config.kv_block_size
        gathered = np.empty(
            (width // block, block, 2, config.num_kv_heads, config.head_dim), dtype=np.float32
        )
        kv.gather(layer, range(origin // block, (origin + width) // block), gathered)
        flat: Float32Array = gathered.reshape(width, 2, config.num_kv_heads, config.head_dim)
        flat[: seen.start - origin] = 0.0
        flat[seen.stop - origin :] = 0.0
        return flat

    def _mlp(self, weights: LayerWeights, normed: Float32Array) -> Float32Array:
        if weights.router is None:
            return _swiglu(normed, weights, 0)
        logits = weights.router(normed)  # [tokens, experts]
        top_k = self.config.experts_per_token
        # Stable sort: ties go to the lower expert id, identically in every process.
        chosen = np.argsort(-logits, axis=-1, kind="stable")[:, :top_k]
        chosen_logits = np.take_along_axis(logits, chosen, axis=-1)
        gates = np.exp(chosen_logits - chosen_logits.max(axis=-1, keepdims=True))
        gates /= gates.sum(axis=-1, keepdims=True)
        out = np.zeros_like(normed)
        # Experts in ascending order: each row sums its experts in the same order alone
        # or in any batch.
        for expert in np.unique(chosen):
            rows, slots = np.nonzero(chosen == expert)
            expert_out = _swiglu(normed[rows], weights, int(expert))
            out[rows] += gates[rows, slots][:, None] * expert_out
        return out


def _whole(branch: Float32Array) -> Float32Array:
    return branch


def _rms_norm(x: Float32Array, gain: Float32Array, config: ReferenceModelConfig) -> Float32Array:
    mean_square = np.mean(np.square(x), axis=-1, keepdims=True)
    normed: Float32Array = x / np.sqrt(mean_square + np.float32(config.rms_norm_eps)) * gain
    return normed


def _swiglu(x: Float32Array, weights: LayerWeights, expert: int) -> Float32Array:
    gate, up = np.split(weights.gate_up[expert](x), 2, axis=-1)
    # sigmoid via tanh: same value as 1 / (1 + exp(-x)) without overflow warnings.
    activated = gate * (np.float32(0.5) * (np.float32(1.0) + np.tanh(gate * np.float32(0.5)))) * up
    result: Float32Array = weights.down[expert](activated)
    return result
