"""Which part of the model a rank holds, and that part's weights (pure).

Megatron-style: attention is split by KV-head groups (each rank keeps whole groups, its
query heads with them, so attention needs no communication), the output projection by
the matching rows; the MLP by intermediate columns (gate and up) and the matching rows
of the down projection. Each rank then holds a partial sum of both residual branches,
which the ranks add up (an all-reduce) before the residual. Norms, the embedding, the
router of a mixture of experts and the output projection are whole on every rank.

Groups that do not divide evenly (SmolLM2-135M has 3 KV heads) split unevenly, the
first ranks one group more, as ``numpy.array_split`` does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from tandem.engines.reference.config import ReferenceModelConfig
from tandem.engines.reference.linear import Linear
from tandem.engines.reference.weights import LayerWeights, ModelWeights


@dataclass(frozen=True, slots=True)
class Shard:
    rank: int
    size: int
    kv_heads: range
    heads: range
    columns: range  # MLP intermediate columns


def plan_shard(config: ReferenceModelConfig, rank: int, size: int) -> Shard:
    """Rank ``rank`` of ``size``; the config has checked that every rank gets a KV head."""
    if not 0 <= rank < size <= config.num_kv_heads:
        raise ValueError(f"rank {rank} of {size} over {config.num_kv_heads} KV heads")
    group = config.num_heads // config.num_kv_heads
    kv_heads = _split(config.num_kv_heads, rank, size)
    return Shard(
        rank=rank,
        size=size,
        kv_heads=kv_heads,
        heads=range(kv_heads.start * group, kv_heads.stop * group),
        columns=_split(config.intermediate, rank, size),
    )


def shard_config(config: ReferenceModelConfig, shard: Shard) -> ReferenceModelConfig:
    """The architecture one rank computes: its heads and columns (its KV pool's shape)."""
    return dataclasses.replace(
        config,
        num_heads=len(shard.heads),
        num_kv_heads=len(shard.kv_heads),
        intermediate=len(shard.columns),
        tensor_parallel_size=1,  # a rank computes its shard whole
    )


def shard_weights(
    weights: ModelWeights, config: ReferenceModelConfig, shard: Shard
) -> ModelWeights:
    """One rank's weights; every ``Linear`` is rebuilt from the slice it keeps."""
    dim, heads, kv_heads = config.head_dim, config.num_heads, config.num_kv_heads
    query = _columns(shard.heads, dim)
    keys = heads * dim + _columns(shard.kv_heads, dim)
    values = (heads + kv_heads) * dim + _columns(shard.kv_heads, dim)
    qkv_columns = np.concatenate((query, keys, values))
    mlp = np.arange(shard.columns.start, shard.columns.stop)
    gate_up_columns = np.concatenate((mlp, config.intermediate + mlp))

    def layer(weights: LayerWeights) -> LayerWeights:
        return dataclasses.replace(
            weights,
            qkv=_linear(weights.qkv.dense()[:, qkv_columns], config),
            out=_linear(weights.out.dense()[query], config),
            gate_up=tuple(_linear(w.dense()[:, gate_up_columns], config) for w in weights.gate_up),
            down=tuple(_linear(w.dense()[mlp], config) for w in weights.down),
        )

    return dataclasses.replace(weights, layers=tuple(layer(w) for w in weights.layers))


def _split(count: int, rank: int, size: int) -> range:
    base, extra = divmod(count, size)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (rank < extra))


def _columns(heads: range, dim: int) -> np.ndarray:
    return np.arange(heads.start * dim, heads.stop * dim)


def _linear(weight: np.ndarray, config: ReferenceModelConfig) -> Linear:
    return Linear(np.ascontiguousarray(weight, dtype=np.float32), config.row_tile)
