"""Deterministic random weights for the reference model (no checkpoint, no download)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tandem.engines.reference.config import ReferenceModelConfig

Float32Array = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class LayerWeights:
    attn_norm: Float32Array  # [hidden]
    qkv: Float32Array  # [hidden, (heads + 2 * kv_heads) * head_dim]
    out: Float32Array  # [heads * head_dim, hidden]
    mlp_norm: Float32Array  # [hidden]
    router: Float32Array | None  # [hidden, experts]; None for a dense MLP
    gate_up: Float32Array  # [experts or 1, hidden, 2 * intermediate]
    down: Float32Array  # [experts or 1, intermediate, hidden]


@dataclass(frozen=True, slots=True)
class ModelWeights:
    embedding: Float32Array  # [vocab, hidden]
    layers: tuple[LayerWeights, ...]
    final_norm: Float32Array  # [hidden]
    unembedding: Float32Array  # [hidden, vocab]


def init_weights(config: ReferenceModelConfig) -> ModelWeights:
    """Gaussian weights scaled by 1/sqrt(fan_in) so each projection keeps unit variance;
    residual branches are damped by 1/sqrt(2 * layers) so the stream does not blow up,
    and logits get a spread of a few units so greedy choices depend on the input."""
    rng = np.random.default_rng(config.seed)

    def gaussian(*shape: int, scale: float) -> Float32Array:
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(np.float32)

    def norm_gain() -> Float32Array:
        return (1.0 + gaussian(config.hidden, scale=0.1)).astype(np.float32)

    hidden, heads, kv_heads = config.hidden, config.num_heads, config.num_kv_heads
    attn_width = heads * config.head_dim
    qkv_width = (heads + 2 * kv_heads) * config.head_dim
    experts = max(1, config.num_experts)
    residual = 1.0 / np.sqrt(2.0 * config.num_layers)
    embedding = gaussian(config.vocab_size, hidden, scale=1.0)
    layers = tuple(
        LayerWeights(
            attn_norm=norm_gain(),
            qkv=gaussian(hidden, qkv_width, scale=1.0 / np.sqrt(hidden)),
            out=gaussian(attn_width, hidden, scale=residual / np.sqrt(attn_width)),
            mlp_norm=norm_gain(),
            router=(
                gaussian(hidden, config.num_experts, scale=1.0 / np.sqrt(hidden))
                if config.num_experts
                else None
            ),
            gate_up=gaussian(experts, hidden, 2 * config.intermediate, scale=1.0 / np.sqrt(hidden)),
            down=gaussian(
                experts, config.intermediate, hidden, scale=residual / np.sqrt(config.intermediate)
            ),
        )
        for _ in range(config.num_layers)
    )
    return ModelWeights(
        embedding=embedding,
        layers=layers,
        final_norm=norm_gain(),
        unembedding=gaussian(hidden, config.vocab_size, scale=3.0 / np.sqrt(hidden)),
    )
