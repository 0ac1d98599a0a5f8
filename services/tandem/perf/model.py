"""The analytic clock: how long one engine step takes on a GPU, from first principles.

A step runs every decoding sequence by one token and the scheduled prefill chunks
(continuous batching with chunked prefill). Its time on one GPU of a TP group is

    layers x per-layer overhead                       (launches, routing, norms)
  + max(linear FLOPs / (FP8 peak x e_linear),         (projections and experts:
        weight bytes read / (HBM x e_memory))          compute-bound in prefill,
                                                       memory-bound in decode)
  + max(decode attention FLOPs / (BF16 peak x e_attn), KV bytes read / (HBM x e_memory))
  + max(prefill attention FLOPs / (BF16 peak x e_attn), KV bytes read / (HBM x e_memory))
  + 2 all-reduces per layer when TP > 1               (latency + ring bytes over NVLink)

* Linear FLOPs are 2 x active parameters per token. Weight bytes per step are the dense
  weights plus every expert some token of the step routes to: with T tokens each picking
  k of E experts, E x (1 - (1 - k/E)^T) experts per layer are read (uniform routing).
* Attention: a query at position p attends to p + 1 keys in full layers and
  min(p + 1, window) in sliding-window layers, 4 x heads x head_dim FLOPs per key
  (scores and the weighted sum). It reads the K/V of every key once per step.
* Everything divides over TP ranks (weights, heads, KV heads as the capacity model
  shards them).

A prompt prefilled alone takes the sum of its chunk steps; attention grows with the
context already cached, so the second 8k chunk of a prompt costs more than the first.
KV capacity comes from the capacity model (HBM - weights - workspace) and KV transfer
time from the KV bytes the capacity model computes over the profile's KV link.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tandem.capacity.fit import check_fit
from tandem.capacity.gpus import GpuSpec
from tandem.capacity.kv import kv_bytes_per_gpu, kv_heads_per_gpu
from tandem.capacity.models import KvDtype, ModelArchitecture
from tandem.kv.events import Tier
from tandem.perf.hardware import GpuPerformance

BF16_BYTES = 2


class StepTimer(Protocol):
    """Anything that prices an engine step: this model, or a clock built on another source."""

    def step_seconds(self, decode_contexts: Sequence[int], chunks: Sequence[Chunk]) -> float: ...


@dataclass(frozen=True, slots=True)
class Chunk:
    """Prefill work in one step: ``new`` prompt tokens after ``cached`` already in KV."""

    cached: int
    new: int


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Fractions of the datasheet peaks real kernels reach, and fixed costs. Defaults are
    calibrated against published figures (docs/simulated-engine.md)."""

    linear: float = 0.5  # of dense FP8 peak: MoE GEMMs with MXFP4 weights
    attention: float = 0.4  # of dense BF16 peak: flash attention
    memory: float = 0.8  # of HBM bandwidth: weight and KV streaming
    layer_overhead_s: float = 40e-6  # kernel launches, routing, norms per layer per step
    allreduce_latency_s: float = 8e-6


@dataclass(frozen=True, slots=True)
class WeightSplit:
    """Weight bytes read whatever the batch (attention, embeddings, router) and per
    expert (all layers together)."""

    dense_bytes: float
    expert_bytes: float


@dataclass(frozen=True, slots=True)
class PerfModel:
    """One worker: a model on ``tensor_parallel_size`` GPUs of one profile. ``gpu`` None
    is a worker without one (a CPU engine): only a measured table can price its steps,
    and the analytic terms below refuse it."""

    model: ModelArchitecture
    gpu: GpuPerformance | None
    tensor_parallel_size: int = 1
    kv_dtype: KvDtype = KvDtype.BF16
    efficiency: Efficiency = field(default_factory=Efficiency)

    def __post_init__(self) -> None:
        if self.tensor_parallel_size < 1:
            raise ValueError("tensor_parallel_size must be >= 1")

    def step_seconds(self, decode_contexts: Sequence[int], chunks: Sequence[Chunk]) -> float:
        return compute_step_seconds(self, decode_contexts, chunks)

    def kv_transfer_seconds(self, tokens: int) -> float:
        return compute_kv_transfer_seconds(self, tokens)


def _gpu_of(perf: PerfModel) -> GpuPerformance:
    if perf.gpu is None:
        raise ValueError(
            f"{perf.model.name}: no GPU to price a step on (a CPU worker is priced by its "
            "measured table)"
        )
    return perf.gpu


def compute_weight_split(model: ModelArchitecture) -> WeightSplit:
    """Split the checkpoint into dense and per-expert bytes. With E experts of which k
    are active: total = dense + E x e and active = dense + k x e give the expert size e;
    dense parameters are stored in bf16, experts take the rest of the checkpoint."""
    if not model.is_moe:
        return WeightSplit(float(model.weight_bytes), 0.0)
    per_expert_params = (model.total_params - model.active_params) / (
        model.num_experts - model.experts_per_token
    )
    dense_params = model.total_params - model.num_experts * per_expert_params
    dense_bytes = dense_params * BF16_BYTES
    return WeightSplit(dense_bytes, (model.weight_bytes - dense_bytes) / model.num_experts)


def compute_experts_touched(model: ModelArchitecture, tokens: int) -> float:
    """Expected distinct experts per layer that ``tokens`` tokens route to."""
    if not model.is_moe or tokens <= 0:
        return 0.0
    experts, active = model.num_experts, model.experts_per_token
    return experts * (1.0 - (1.0 - active / experts) ** tokens)


def compute_linear_seconds(perf: PerfModel, tokens: int) -> float:
    """Projections and MLP/experts for ``tokens`` tokens on one GPU of the TP group."""
    if tokens <= 0:
        return 0.0
    tp, eff, gpu = perf.tensor_parallel_size, perf.efficiency, _gpu_of(perf)
    flops = 2.0 * perf.model.active_params * tokens / tp
    split = compute_weight_split(perf.model)
    weight_bytes = (
        split.dense_bytes + compute_experts_touched(perf.model, tokens) * split.expert_bytes
    ) / tp
    return max(
        flops / (gpu.fp8_flops * eff.linear),
        weight_bytes / (gpu.hbm_bytes_per_second * eff.memory),
    )


def sum_window_keys(first: int, last: int, window: int) -> int:
    """sum(min(k, window) for k in first..last): keys seen by queries whose key counts
    run from ``first`` to ``last``."""
    if last < first:
        return 0
    ramp_end = min(last, window)
    ramp = (first + ramp_end) * (ramp_end - first + 1) // 2 if ramp_end >= first else 0
    flat = (last - max(first - 1, window)) * window if last > window else 0
    return ramp + flat


def compute_attention_work(
    model: ModelArchitecture, chunk: Chunk, kv_dtype: KvDtype
) -> tuple[float, float]:
    """(FLOPs, KV bytes read) of one sequence's queries in one step, whole model: a
    decode row is ``Chunk(context, 1)``."""
    first, last = chunk.cached + 1, chunk.cached + chunk.new  # keys of the first/last query
    full_keys = (first + last) * chunk.new // 2
    window = model.sliding_window or 0
    sliding_keys = sum_window_keys(first, last, window) if model.sliding_layers else 0
    per_key = 4.0 * model.num_attention_heads * model.head_dim
    flops = per_key * (model.full_layers * full_keys + model.sliding_layers * sliding_keys)
    token_bytes = 2 * model.num_kv_heads * model.head_dim * kv_dtype.nbytes
    kept = model.full_layers * last + model.sliding_layers * min(last, window)
    return flops, float(kept * token_bytes)


def compute_decode_attention_work(
    model: ModelArchitecture, contexts: Sequence[int], kv_dtype: KvDtype
) -> tuple[float, float]:
    """``compute_attention_work`` summed over decode rows (``Chunk(c, 1)`` each), in one
    pass: a row after ``c`` tokens has ``c + 1`` keys, ``min(c + 1, window)`` in window
    layers."""
    full_keys = sum(contexts) + len(contexts)
    window = model.sliding_window or 0
    sliding_keys = sum(min(c + 1, window) for c in contexts) if model.sliding_layers else 0
    per_key = 4.0 * model.num_attention_heads * model.head_dim
    flops = per_key * (model.full_layers * full_keys + model.sliding_layers * sliding_keys)
    token_bytes = 2 * model.num_kv_heads * model.head_dim * kv_dtype.nbytes
    return flops, float(
        (model.full_layers * full_keys + model.sliding_layers * sliding_keys) * token_bytes
    )


def compute_attention_seconds(perf: PerfModel, chunks: Sequence[Chunk]) -> float:
    """One attention kernel over ``chunks`` (compute- or memory-bound as a whole)."""
    if not chunks:
        return 0.0
    flops = kv = 0.0
    for chunk in chunks:
        f, b = compute_attention_work(perf.model, chunk, perf.kv_dtype)
        flops, kv = flops + f, kv + b
    return _attention_roofline(perf, flops, kv)


def compute_decode_attention_seconds(perf: PerfModel, contexts: Sequence[int]) -> float:
    """``compute_attention_seconds`` of decode rows after ``contexts`` tokens each."""
    if not contexts:
        return 0.0
    return _attention_roofline(
        perf, *compute_decode_attention_work(perf.model, contexts, perf.kv_dtype)
    )


def _attention_roofline(perf: PerfModel, flops: float, kv: float) -> float:
    model, tp, eff, gpu = perf.model, perf.tensor_parallel_size, perf.efficiency, _gpu_of(perf)
    kv_share = kv_heads_per_gpu(model, tp) / model.num_kv_heads
    return max(
        flops / tp / (gpu.bf16_flops * eff.attention),
        kv * kv_share / (gpu.hbm_bytes_per_second * eff.memory),
    )


def compute_allreduce_seconds(perf: PerfModel, tokens: int) -> float:
    """Two ring all-reduces of the hidden state per layer (after attention and MLP)."""
    tp = perf.tensor_parallel_size
    if tp == 1 or tokens <= 0:
        return 0.0
    nbytes = tokens * perf.model.hidden_size * BF16_BYTES * 2.0 * (tp - 1) / tp
    one = perf.efficiency.allreduce_latency_s + nbytes / _gpu_of(perf).nvlink_bytes_per_second
    return 2 * perf.model.num_layers * one


def compute_step_seconds(
    perf: PerfModel, decode_contexts: Sequence[int], chunks: Sequence[Chunk]
) -> float:
    """One engine step: a row per decoding sequence (its context before this token) and
    the prefill chunks scheduled with them (module docstring)."""
    tokens = len(decode_contexts) + sum(c.new for c in chunks)
    if tokens == 0:
        return 0.0
    decode = compute_decode_attention_seconds(perf, decode_contexts)
    prefill = compute_attention_seconds(perf, [c for c in chunks if c.new])
    overhead = perf.model.num_layers * perf.efficiency.layer_overhead_s
    return (
        overhead
        + compute_linear_seconds(perf, tokens)
        + decode
        + prefill
        + compute_allreduce_seconds(perf, tokens)
    )


def compute_prefill_seconds(clock: StepTimer, prompt_tokens: int, chunk_tokens: int) -> float:
    """A prompt prefilled alone, ``chunk_tokens`` per step."""
    if chunk_tokens < 1:
        raise ValueError("chunk_tokens must be >= 1")
    total, done = 0.0, 0
    while done < prompt_tokens:
        n = min(chunk_tokens, prompt_tokens - done)
        total += clock.step_seconds((), (Chunk(done, n),))
        done += n
    return total


def compute_kv_transfer_seconds(perf: PerfModel, tokens: int) -> float:
    """Move a ``tokens``-token sequence's KV to another worker: every rank sends its
    shard over its own link, in parallel."""
    if tokens <= 0:
        return 0.0
    link = _gpu_of(perf).kv_link
    shard = kv_bytes_per_gpu(
        perf.model, tokens, dtype=perf.kv_dtype, tensor_parallel_size=perf.tensor_parallel_size
    )
    return link.latency_s + shard / link.effective_bytes_per_second


def compute_onboard_seconds(perf: PerfModel, tokens: Mapping[Tier, int]) -> float:
    """Copy the KV of ``tokens[tier]`` prompt tokens back into the pool from each offload
    tier: every rank its shard over its own host (``Tier.HOST``) or disk link, in
    parallel; the tiers one after the other."""
    gpu = _gpu_of(perf)
    links = {Tier.HOST: gpu.host_link, Tier.DISK: gpu.disk_link}
    seconds = 0.0
    for tier, count in tokens.items():
        if count <= 0:
            continue
        link = links[tier]
        shard = kv_bytes_per_gpu(
            perf.model, count, dtype=perf.kv_dtype, tensor_parallel_size=perf.tensor_parallel_size
        )
        seconds += link.latency_s + shard / link.effective_bytes_per_second
    return seconds


@dataclass(frozen=True, slots=True)
class _TensorParallel:
    """A pool as ``check_fit`` reads it."""

    tensor_parallel_size: int


@dataclass(frozen=True, slots=True)
class KvCapacity:
    """A worker's KV pool per GPU, counted in blocks of ``tokens_per_block`` tokens of the
    full-attention layers (window layers add a fixed few blocks per sequence)."""

    pool_bytes: int
    block_bytes: int
    tokens_per_block: int

    @property
    def blocks(self) -> int:
        return self.pool_bytes // self.block_bytes


def compute_kv_capacity(
    perf: PerfModel,
    memory: GpuSpec,
    *,
    free_gpu_memory_fraction: float = 0.9,
    max_num_tokens: int = 8192,
    tokens_per_block: int = 32,
) -> KvCapacity:
    """The capacity model's KV pool (HBM - weights - workspace, times the fraction)."""
    model, tp = perf.model, perf.tensor_parallel_size
    report = check_fit(
        model,
        _TensorParallel(tp),
        memory,
        1,
        seq_tokens=1,
        kv_dtype=perf.kv_dtype,
        free_gpu_memory_fraction=free_gpu_memory_fraction,
        max_num_tokens=max_num_tokens,
        tokens_per_block=tokens_per_block,
    )
    if not report.weights_fit:
        raise ValueError(report.message)
    return compute_pool_capacity(perf, report.kv_pool_bytes, tokens_per_block)


def compute_pool_capacity(perf: PerfModel, pool_bytes: int, tokens_per_block: int) -> KvCapacity:
    """A pool of ``pool_bytes`` per GPU in the worker's blocks: what the capacity model
    leaves on a GPU, or what a CPU engine preallocates."""
    model, tp = perf.model, perf.tensor_parallel_size
    layers = model.full_layers or model.num_layers
    block = 2 * model.head_dim * perf.kv_dtype.nbytes * kv_heads_per_gpu(model, tp)
    return KvCapacity(pool_bytes, block * layers * tokens_per_block, tokens_per_block)


def compute_sequence_blocks(perf: PerfModel, capacity: KvCapacity, tokens: int) -> int:
    """Blocks a sequence of ``tokens`` occupies in the paged pool."""
    footprint = kv_bytes_per_gpu(
        perf.model,
        tokens,
        dtype=perf.kv_dtype,
        tensor_parallel_size=perf.tensor_parallel_size,
        tokens_per_block=capacity.tokens_per_block,
    )
    return math.ceil(footprint / capacity.block_bytes)
