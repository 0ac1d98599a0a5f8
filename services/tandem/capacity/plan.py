"""Capacity plan of an InferenceCluster: does each pool's worker fit its GPUs?

The plan checks exactly what would be deployed: the TensorRT-LLM options rendered for
each pool (KV dtype, memory fraction, block size, transfer buffer, step size) against the
accelerator profile's GPU. The batch a worker must hold is, in order of precedence, the
engine option ``max_batch_size``; for decode the autoscaler's
``targetActiveSequencesPerReplica``; for prefill enough slots for
``targetQueuedTokensPerReplica`` of maximum-length prompts. Prefill slots hold a prompt;
decode slots hold a prompt plus the longest answer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tandem.api.v1alpha1 import (
    AcceleratorProfile,
    EngineKind,
    InferenceCluster,
    InferenceClusterSpec,
    PoolRole,
)
from tandem.capacity.fit import FitReport, check_fit
from tandem.capacity.gpus import gpu_for
from tandem.capacity.models import ModelArchitecture, find_architecture, parse_kv_dtype
from tandem.engines.trtllm.config import pool_of, render_trtllm_config


@dataclass(frozen=True, slots=True)
class PoolPlan:
    role: PoolRole
    max_replicas: int
    gpus_per_worker: int
    max_batch: int
    max_batch_source: str
    report: FitReport

    @property
    def fits(self) -> bool:
        return self.report.fits


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    model: str
    profile: AcceleratorProfile
    pools: tuple[PoolPlan, ...]
    # Why no pool was checked (cpu profile, unknown model, non-GPU engine); None if checked.
    skipped: str | None = None

    @property
    def fits(self) -> bool:
        return all(p.fits for p in self.pools)

    @property
    def max_gpus(self) -> int:
        return sum(p.max_replicas * p.gpus_per_worker for p in self.pools)


def plan_cluster(cluster: InferenceCluster | InferenceClusterSpec) -> ClusterPlan:
    spec = cluster.spec if isinstance(cluster, InferenceCluster) else cluster
    profile = spec.accelerator.profile
    architecture = find_architecture(spec.model.name)
    skipped = _skip_reason(spec, architecture)
    if skipped is not None or architecture is None:
        return ClusterPlan(spec.model.name, profile, (), skipped or "unknown model")
    pools = tuple(_plan_pool(spec, architecture, role) for role in PoolRole)
    return ClusterPlan(spec.model.name, profile, pools)


def _skip_reason(spec: InferenceClusterSpec, architecture: ModelArchitecture | None) -> str | None:
    if spec.accelerator.profile is AcceleratorProfile.CPU:
        return "the cpu profile has no GPU memory to plan"
    if spec.engine.kind is not EngineKind.TRTLLM:
        return f"capacity planning covers the trtllm engine, not {spec.engine.kind.value!r}"
    if architecture is None:
        return (
            f"unknown model architecture {spec.model.name!r}; known: gpt-oss-120b, "
            "gpt-oss-20b, tandem-reference"
        )
    return None


def _plan_pool(
    spec: InferenceClusterSpec, architecture: ModelArchitecture, role: PoolRole
) -> PoolPlan:
    pool = pool_of(spec, role)
    options = render_trtllm_config(spec, role)
    kv_cache: Mapping[str, Any] = options["kv_cache_config"]
    max_batch, source = _max_batch(spec, role, options)
    model = spec.model
    seq_tokens = model.max_input_tokens
    if role is PoolRole.DECODE:
        seq_tokens += model.max_output_tokens
    report = check_fit(
        architecture,
        pool,
        gpu_for(spec.accelerator.profile),
        max_batch,
        seq_tokens=seq_tokens,
        kv_dtype=parse_kv_dtype(str(kv_cache["dtype"]), native=architecture.native_kv_dtype),
        free_gpu_memory_fraction=float(kv_cache["free_gpu_memory_fraction"]),
        max_num_tokens=int(options["max_num_tokens"]),
        tokens_per_block=int(kv_cache["tokens_per_block"]),
        transfer_buffer_tokens=int(options["cache_transceiver_config"]["max_tokens_in_buffer"]),
    )
    gpus = pool.gpus_per_worker or pool.tensor_parallel_size
    return PoolPlan(role, pool.max_replicas, gpus, max_batch, source, report)


def _max_batch(
    spec: InferenceClusterSpec, role: PoolRole, options: Mapping[str, Any]
) -> tuple[int, str]:
    explicit = options.get("max_batch_size")
    if isinstance(explicit, int) and not isinstance(explicit, bool) and explicit > 0:
        return explicit, f"{role.value} engine option max_batch_size"
    if role is PoolRole.DECODE:
        target = spec.autoscaling.decode.target_active_sequences_per_replica
        return target, "autoscaling.decode.targetActiveSequencesPerReplica"
    queued = spec.autoscaling.prefill.target_queued_tokens_per_replica
    slots = max(1, math.ceil(queued / spec.model.max_input_tokens))
    return slots, "autoscaling.prefill.targetQueuedTokensPerReplica / model.maxInputTokens"
