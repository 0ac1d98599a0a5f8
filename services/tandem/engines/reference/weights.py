"""The reference model's weights: their layout, and deterministic random ones (no
checkpoint, no download) for the gpt-oss-shaped model. GGUF files load into the same
layout (``gguf_weights.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tandem.engines.reference.config import ReferenceModelConfig
from tandem.engines.reference.linear import Linear

Float32Array = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class LayerWeights:
    attn_norm: Float32Array  # [hidden]
    qkv: Linear  # hidden -> (heads + 2 * kv_heads) * head_dim: Q, then K, then V
    out: Linear  # heads * head_dim -> hidden
    mlp_norm: Float32Array  # [hidden]
    router: Linear | None  # hidden -> experts; None for a dense MLP
    gate_up: tuple[Linear, ...]  # per expert (one for dense): hidden -> 2 * intermediate
    down: tuple[Linear, ...]  # per expert: intermediate -> hidden

    @property
    def nbytes(self) -> int:
        linears = [self.qkv, self.out, *self.gate_up, *self.down]
        if self.router is not None:
            linears.append(self.router)
        return sum(x.nbytes for x in linears) + self.attn_norm.nbytes + self.mlp_norm.nbytes


@dataclass(frozen=True, slots=True)
class ModelWeights:
    # [vocab, hidden]; None when tied to the output projection (read from it instead).
    embedding: Float32Array | None
    layers: tuple[LayerWeights, ...]
    final_norm: Float32Array  # [hidden]
    unembedding: Linear  # hidden -> vocab

    def embed(self, tokens: Sequence[int]) -> Float32Array:
        ids = np.asarray(tokens, dtype=np.int64)
        if self.embedding is None:
            return np.ascontiguousarray(self.unembedding.columns(ids))
        rows: Float32Array = self.embedding[ids]
        return rows

    @property
    def nbytes(self) -> int:
        embedding = 0 if self.embedding is None else self.embedding.nbytes
        layers = sum(layer.nbytes for layer in self.layers)
        return embedding + layers + self.final_norm.nbytes + self.unembedding.nbytes


def init_weights(config: ReferenceModelConfig) -> ModelWeights:
    """Gaussian weights scaled by 1/sqrt(fan_in) so each projection keeps unit variance;
    residual branches are damped by 1/sqrt(2 * layers) so the stream does not blow up,
    and logits get a spread of a few units so greedy choices depend on the input."""
    rng = np.random.default_rng(config.seed)
    tile = config.row_tile

    def gaussian(*shape: int, scale: float) -> Float32Array:
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(np.float32)

    def linear(fan_in: int, fan_out: int, scale: float) -> Linear:
        return Linear(gaussian(fan_in, fan_out, scale=scale), tile)

    def norm_gain() -> Float32Array:
        return (1.0 + gaussian(config.hidden, scale=0.1)).astype(np.float32)

    hidden, heads, kv_heads = config.hidden, config.num_heads, config.num_kv_heads
    attn_width = heads * config.head_dim
    qkv_width = (heads + 2 * kv_heads) * config.head_dim
    experts = max(1, config.num_experts)
    residual = 1.0 / np.sqrt(2.0 * config.num_layers)
    embedding = gaussian(config.vocab_size, hidden, scale=1.0)

    def layer() -> LayerWeights:
        attn_norm = norm_gain()
        qkv = linear(hidden, qkv_width, 1.0 / np.sqrt(hidden))
        out = linear(attn_width, hidden, residual / np.sqrt(attn_width))
        mlp_norm = norm_gain()
        router = (
            linear(hidden, config.num_experts, 1.0 / np.sqrt(hidden))
            if config.num_experts
            else None
        )
        gate_up = tuple(
            linear(hidden, 2 * config.intermediate, 1.0 / np.sqrt(hidden)) for _ in range(experts)
        )
        down = tuple(
            linear(config.intermediate, hidden, residual / np.sqrt(config.intermediate))
            for _ in range(experts)
        )
        return LayerWeights(attn_norm, qkv, out, mlp_norm, router, gate_up, down)

    layers = tuple(layer() for _ in range(config.num_layers))
    return ModelWeights(
        embedding=embedding,
        layers=layers,
        final_norm=norm_gain(),
        unembedding=linear(hidden, config.vocab_size, 3.0 / np.sqrt(hidden)),
    )
