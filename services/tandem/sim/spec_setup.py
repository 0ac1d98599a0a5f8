"""An InferenceCluster spec as the planner sees it (pure): the simulated engines that
stand for each pool's workers, and how far each pool may grow.

Both GPU-shaped engines plan alike. A ``simulated`` spec's own options are used as they
are; a ``trtllm`` spec's rendered LLM API options give the KV dtype, the memory fraction
and the step size (``kv_cache_config.dtype``, ``kv_cache_config.free_gpu_memory_fraction``,
``max_num_tokens``), so the plan models the engine the operator would deploy.

The ``reference`` engine on the ``cpu`` profile has no step-time database: it plans from
a table ``tandem profile`` measured where its workers run. Each worker is then a
simulated engine on cpu that takes the table's step times and the measured worker's
model shape, KV pool and step budget (``tandem.perf.table``'s ``worker``), one process
per worker; without a table the spec is refused, saying how to measure one. A table
given for a GPU spec prices its steps instead of the spec's clock.
"""

from __future__ import annotations

from typing import Any

from tandem.api.v1alpha1 import AcceleratorProfile, EngineKind, InferenceClusterSpec, PoolRole
from tandem.capacity.gpus import gpu_for
from tandem.capacity.models import compute_model_key
from tandem.engines.simulated.config import render_simulated_options
from tandem.engines.trtllm.config import pool_engine_options, pool_of, render_trtllm_config
from tandem.perf.table import PerfTable, PerfTableError, load_perf_table
from tandem.sim.planner import Limits, Setup

# Tensor-parallel sizes the planner tries, within one node of the profile.
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)
# What the simulated engine takes from a trtllm spec: everything else about the GPU comes
# from the accelerator profile.
_TRTLLM_KEYS = ("max_num_tokens", "max_batch_size")


class PlanSpecError(ValueError):
    """The spec cannot be planned; the message names the field."""


def compute_setup(
    spec: InferenceClusterSpec, perf_table: str | None = None
) -> tuple[Setup, Limits]:
    """``perf_table`` names a ``tandem.perf-table/v1`` file (PerfTableError when it is
    unreadable or malformed)."""
    profile, kind = spec.accelerator.profile, spec.engine.kind
    table = None if perf_table is None else load_perf_table(perf_table)
    measured = "" if table is None else table.model  # "": the table does not say
    if measured and compute_model_key(measured) != compute_model_key(spec.model.name):
        raise PlanSpecError(
            f"model.name: {spec.model.name!r}, but the perf table measured {measured!r}"
        )
    if kind is EngineKind.REFERENCE and profile is AcceleratorProfile.CPU:
        return _compute_measured_setup(spec, perf_table, table)
    if profile is AcceleratorProfile.CPU:
        raise PlanSpecError(
            f"accelerator.profile: on cpu the planner covers the reference engine, not "
            f"{kind.value!r}; GPU engines plan on gb200, b200, h200 or h100"
        )
    if kind is EngineKind.REFERENCE:
        raise PlanSpecError(
            f"engine.kind: the reference engine runs on the cpu profile, not {profile.value!r}"
        )
    options = {role: _engine_options(spec, role, perf_table) for role in PoolRole}
    node = gpu_for(profile).gpus_per_node
    limits = Limits(
        spec.prefill.max_replicas,
        spec.decode.max_replicas,
        spec.prefill.tensor_parallel_size,
        spec.decode.tensor_parallel_size,
        tuple(tp for tp in TENSOR_PARALLEL_SIZES if tp <= node),
    )
    return _setup(spec, options[PoolRole.PREFILL], options[PoolRole.DECODE]), limits


def _compute_measured_setup(
    spec: InferenceClusterSpec, perf_table: str | None, table: PerfTable | None
) -> tuple[Setup, Limits]:
    if perf_table is None or table is None:
        raise PlanSpecError(
            "engine.kind: the reference engine has no step-time database; measure it where "
            "its workers run with `tandem profile -f FILE -o table.json`, then plan with "
            "`tandem plan -f FILE --perf-table table.json ...` (or start it planned with "
            "`tandem up -f FILE --perf-table table.json`)"
        )
    worker = table.worker
    if worker is None:
        raise PerfTableError(
            f"performance table {perf_table}: no worker (the engine's model shape and KV "
            "pool); `tandem profile` records it"
        )
    options = {
        "model": spec.model.name,
        "accelerator": AcceleratorProfile.CPU.value,
        "perf_table": perf_table,
        "max_num_tokens": worker.max_num_tokens,
        "tokens_per_block": worker.tokens_per_block,
    }
    # A reference worker is one process: no tensor parallelism to search.
    limits = Limits(spec.prefill.max_replicas, spec.decode.max_replicas, 1, 1, (1,))
    return _setup(spec, options, options), limits


def _setup(spec: InferenceClusterSpec, prefill: dict[str, Any], decode: dict[str, Any]) -> Setup:
    disaggregation = spec.frontend.disaggregation
    return Setup(
        prefill,
        decode,
        disaggregation.min_prefill_tokens,
        disaggregation.max_prefill_wait_seconds,
    )


def _engine_options(
    spec: InferenceClusterSpec, role: PoolRole, perf_table: str | None
) -> dict[str, Any]:
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
    if perf_table is not None:
        own["perf_table"] = perf_table
    return render_simulated_options(
        own,
        model=spec.model.name,
        accelerator=spec.accelerator.profile,
        tensor_parallel_size=pool.tensor_parallel_size,
        offload=pool.kv_cache.offload,
    )
