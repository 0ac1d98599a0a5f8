"""An InferenceCluster spec as the planner sees it (pure): the simulated engines that
stand for each pool's workers, and how far each pool may grow.

Both GPU-shaped engines plan alike. A ``simulated`` spec's own options are used as they
are; a ``trtllm`` spec's rendered LLM API options give the KV dtype, the memory fraction
and the step size (``kv_cache_config.dtype``, ``kv_cache_config.free_gpu_memory_fraction``,
``max_num_tokens``), so the plan models the engine the operator would deploy.
"""

from __future__ import annotations

from typing import Any

from tandem.api.v1alpha1 import AcceleratorProfile, EngineKind, InferenceClusterSpec, PoolRole
from tandem.capacity.gpus import gpu_for
from tandem.engines.simulated.config import render_simulated_options
from tandem.engines.trtllm.config import pool_engine_options, pool_of, render_trtllm_config
from tandem.sim.planner import Limits, Setup

# Tensor-parallel sizes the planner tries, within one node of the profile.
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)
# What the simulated engine takes from a trtllm spec: everything else about the GPU comes
# from the accelerator profile.
_TRTLLM_KEYS = ("max_num_tokens", "max_batch_size")


class PlanSpecError(ValueError):
    """The spec cannot be planned; the message names the field."""


def compute_setup(spec: InferenceClusterSpec) -> tuple[Setup, Limits]:
    if spec.accelerator.profile is AcceleratorProfile.CPU:
        raise PlanSpecError(
            "accelerator.profile: plans are for GPU profiles (gb200, b200, h200, h100), not cpu"
        )
    if spec.engine.kind is EngineKind.REFERENCE:
        raise PlanSpecError(
            "engine.kind: the reference engine runs on CPUs; plan a trtllm or simulated spec"
        )
    options = {role: _engine_options(spec, role) for role in PoolRole}
    setup = Setup(
        options[PoolRole.PREFILL],
        options[PoolRole.DECODE],
        spec.frontend.disaggregation.min_prefill_tokens,
        spec.frontend.disaggregation.max_prefill_wait_seconds,
    )
    node = gpu_for(spec.accelerator.profile).gpus_per_node
    limits = Limits(
        spec.prefill.max_replicas,
        spec.decode.max_replicas,
        spec.prefill.tensor_parallel_size,
        spec.decode.tensor_parallel_size,
        tuple(tp for tp in TENSOR_PARALLEL_SIZES if tp <= node),
    )
    return setup, limits


def _engine_options(spec: InferenceClusterSpec, role: PoolRole) -> dict[str, Any]:
    pool = pool_of(spec, role)
    if spec.engine.kind is EngineKind.SIMULATED:
        own = pool_engine_options(spec, role)
    else:
        rendered = render_trtllm_config(spec, role)
        kv = rendered.get("kv_cache_config", {})
        own = {key: rendered[key] for key in _TRTLLM_KEYS if key in rendered}
        own["kv_cache_dtype"] = str(kv.get("dtype", "auto"))
        if "free_gpu_memory_fraction" in kv:
            own["free_gpu_memory_fraction"] = float(kv["free_gpu_memory_fraction"])
    return render_simulated_options(
        own,
        model=spec.model.name,
        accelerator=spec.accelerator.profile,
        tensor_parallel_size=pool.tensor_parallel_size,
    )
