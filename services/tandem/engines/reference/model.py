"""The reference transformer's forward pass over a run of consecutive tokens.

Pre-norm blocks: RMSNorm -> GQA attention with RoPE (sliding window on even layers) ->
residual; RMSNorm -> SwiGLU MLP or top-k mixture of experts -> residual. The same code
serves a prefill chunk (many tokens) and a decode step (one token); KV goes through a
``KvStore`` so the model never sees blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from tandem.engines.reference.attention import apply_rope, attend, compute_rope
from tandem.engines.reference.config import ReferenceModelConfig
from tandem.engines.reference.weights import LayerWeights, ModelWeights, init_weights

Float32Array = npt.NDArray[np.float32]


class KvStore(Protocol):
    def write(self, layer: int, start: int, keys: Float32Array, values: Float32Array) -> None: ...

    def read(self, layer: int, positions: range) -> tuple[Float32Array, Float32Array]: ...


class ReferenceModel:
    def __init__(self, config: ReferenceModelConfig) -> None:
        self.config = config
        self.weights: ModelWeights = init_weights(config)

    def forward(self, tokens: Sequence[int], start: int, kv: KvStore) -> Float32Array:
        """Run ``tokens`` at positions ``start...`` (every earlier position the layers
        need is already in ``kv``; blocks for the new ones are allocated). Writes their
        KV and returns the logits of the LAST token, ``[vocab]`` float32."""
        config = self.config
        positions = range(start, start + len(tokens))
        cos, sin = compute_rope(positions, config.head_dim, config.rope_theta)
        hidden = self.weights.embedding[np.asarray(tokens, dtype=np.int64)]
        for layer, weights in enumerate(self.weights.layers):
            hidden = hidden + self._attention(layer, weights, hidden, positions, cos, sin, kv)
            hidden = hidden + self._mlp(weights, _rms_norm(hidden, weights.mlp_norm, config))
        last = _rms_norm(hidden[-1:], self.weights.final_norm, config)
        logits: Float32Array = (last @ self.weights.unembedding)[0]
        return logits

    def _attention(
        self,
        layer: int,
        weights: LayerWeights,
        hidden: Float32Array,
        positions: range,
        cos: Float32Array,
        sin: Float32Array,
        kv: KvStore,
    ) -> Float32Array:
        config = self.config
        count, heads, kv_heads, dim = (
            len(positions),
            config.num_heads,
            config.num_kv_heads,
            config.head_dim,
        )
        qkv = _rms_norm(hidden, weights.attn_norm, config) @ weights.qkv
        queries = apply_rope(qkv[:, : heads * dim].reshape(count, heads, dim), cos, sin)
        keys = apply_rope(
            qkv[:, heads * dim : (heads + kv_heads) * dim].reshape(count, kv_heads, dim), cos, sin
        )
        values = qkv[:, (heads + kv_heads) * dim :].reshape(count, kv_heads, dim)
        kv.write(layer, positions.start, keys, values)
        window = config.sliding_window if config.is_sliding(layer) else None
        first_key = 0 if window is None else max(0, positions.start - window + 1)
        cached_keys, cached_values = kv.read(layer, range(first_key, positions.stop))
        out = attend(
            queries,
            positions.start,
            cached_keys,
            cached_values,
            first_key,
            window=window,
            tile=config.attention_tile,
        )
        projected: Float32Array = out.reshape(count, heads * dim) @ weights.out
        return projected

    def _mlp(self, weights: LayerWeights, normed: Float32Array) -> Float32Array:
        if weights.router is None:
            return _swiglu(normed, weights.gate_up[0], weights.down[0])
        logits = normed @ weights.router  # [tokens, experts]
        top_k = self.config.experts_per_token
        # Stable sort: ties go to the lower expert id, identically in every process.
        chosen = np.argsort(-logits, axis=-1, kind="stable")[:, :top_k]
        chosen_logits = np.take_along_axis(logits, chosen, axis=-1)
        gates = np.exp(chosen_logits - chosen_logits.max(axis=-1, keepdims=True))
        gates /= gates.sum(axis=-1, keepdims=True)
        out = np.zeros_like(normed)
        for expert in np.unique(chosen):
            rows, slots = np.nonzero(chosen == expert)
            expert_out = _swiglu(normed[rows], weights.gate_up[expert], weights.down[expert])
            out[rows] += gates[rows, slots][:, None] * expert_out
        return out


def _rms_norm(x: Float32Array, gain: Float32Array, config: ReferenceModelConfig) -> Float32Array:
    mean_square = np.mean(np.square(x), axis=-1, keepdims=True)
    normed: Float32Array = x / np.sqrt(mean_square + np.float32(config.rms_norm_eps)) * gain
    return normed


def _swiglu(x: Float32Array, gate_up: Float32Array, down: Float32Array) -> Float32Array:
    projected = x @ gate_up
    gate, up = np.split(projected, 2, axis=-1)
    # sigmoid via tanh: same value as 1 / (1 + exp(-x)) without overflow warnings.
    activated = gate * (np.float32(0.5) * (np.float32(1.0) + np.tanh(gate * np.float32(0.5)))) * up
    result: Float32Array = activated @ down
    return result
