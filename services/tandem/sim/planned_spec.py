"""``apply_plan(spec, plan) -> spec`` (pure): the spec the operator renders under
``planning.mode: auto``.

The plan replaces only what it decided -- each pool's workers, tensor parallelism and the
decode step budget, and under autoscaling the per-replica targets (an aggregated plan's
prefill pool then stands by at zero workers) -- so everything else a
user wrote (images, pod templates, resources, routing) renders as before. Rendering then
runs unchanged: spec -> plan -> render.
"""

from __future__ import annotations

from typing import TypeVar

from tandem.api.base import OpenObject
from tandem.api.v1alpha1 import (
    EngineKind,
    InferenceCluster,
    InferenceClusterSpec,
    PlannedPool,
    PlanningMode,
    PlanOutcome,
    PlanStatus,
    PoolSpec,
)

P = TypeVar("P", bound=PoolSpec)

# How long a long prompt waits for a prefill worker that is starting, in TTFT targets,
# where the plan lets the prefill pool stand at zero.
START_WAIT_TTFTS = 5


def apply_plan(spec: InferenceClusterSpec, plan: PlanStatus | None) -> InferenceClusterSpec:
    """``spec`` with ``plan``'s shape when the spec asks for auto and the plan meets its
    SLO; ``spec`` itself otherwise (the hand-written shape)."""
    if (
        plan is None
        or spec.planning.mode is not PlanningMode.AUTO
        or plan.mode is not PlanningMode.AUTO
        or plan.outcome is not PlanOutcome.MET
        or plan.decode is None
    ):
        return spec
    kind = spec.engine.kind
    standby = spec.autoscaling.enabled
    prefill = _shape_pool(spec.prefill, plan.prefill, kind, standby=standby)
    updates: dict[str, object] = {
        "prefill": prefill,
        "decode": _shape_pool(spec.decode, plan.decode, kind, standby=standby),
    }
    targets = plan.autoscaling
    routing = spec.frontend.disaggregation
    if standby and targets is not None:
        scaling = spec.autoscaling
        # An aggregated plan has no prefill target: a standby pool keeps the spec's.
        prefill_target = (
            targets.prefill_tokens_per_second_per_replica
            or scaling.prefill.target_tokens_per_second_per_replica
        )
        updates["autoscaling"] = scaling.model_copy(
            update={
                "prefill": scaling.prefill.model_copy(
                    update={"target_tokens_per_second_per_replica": prefill_target}
                ),
                "decode": scaling.decode.model_copy(
                    update={
                        "target_active_sequences_per_replica": (
                            targets.decode_active_sequences_per_replica
                        )
                    }
                ),
            }
        )
        if targets.max_prefill_wait_seconds is not None:
            routing = routing.model_copy(
                update={"max_prefill_wait_seconds": targets.max_prefill_wait_seconds}
            )
    if (
        standby
        and prefill.min_replicas == 0 < prefill.max_replicas
        and routing.max_prefill_start_wait_seconds is None
        and spec.slo is not None
    ):
        # The prefill pool may stand at zero, so the first long prompts of a burst find
        # it starting. Prefilled on a decode worker meanwhile, each one stalls every
        # stream there (a 32k prompt, ~0.4 s on a GB200, is 60 tokens' worth of a 6 ms
        # ITL), so they wait for the starting worker instead. Past the TTFT target such
        # a prompt is late either way, and the streams are not: the wait only bounds a
        # worker that never comes up (a crash loop).
        wait = START_WAIT_TTFTS * spec.slo.ttft_p90_seconds
        routing = routing.model_copy(update={"max_prefill_start_wait_seconds": wait})
    if routing is not spec.frontend.disaggregation:
        updates["frontend"] = spec.frontend.model_copy(update={"disaggregation": routing})
    return spec.model_copy(update=updates)


def _shape_pool(pool: P, planned: PlannedPool | None, kind: EngineKind, *, standby: bool) -> P:
    """``pool`` resized to ``planned``. No plan for it (an aggregated plan: its decode
    workers prefill): no worker, and no room to grow unless ``standby`` (autoscaling on),
    which keeps the pool's upper bound. A prefill pool at zero costs nothing while the
    workload is the one planned for, and the autoscaler grows it when long prompts come
    that the plan was not made for (a burst, or a drift before it re-plans): the router
    prefills them on the decode workers meanwhile and counts them as diverted, which is
    what brings the pool up (docs/autoscaling.md, *Scale to zero*)."""
    if planned is None:
        bound = pool.max_replicas if standby else 0
        return pool.model_copy(update={"replicas": 0, "min_replicas": 0, "max_replicas": bound})
    workers = planned.workers
    update: dict[str, object] = {
        "replicas": workers,
        # The spec's bounds stay where they hold the planned size (autoscaling range).
        "min_replicas": min(pool.min_replicas, workers),
        "max_replicas": max(pool.max_replicas, workers),
    }
    if planned.tensor_parallel_size != pool.tensor_parallel_size:
        # The planner searches TP within one node; GPUs per worker follow the new TP.
        update |= {
            "tensor_parallel_size": planned.tensor_parallel_size,
            "gpus_per_worker": None,
            "nodes_per_worker": 1,
        }
    planned_limits = {
        key: value for key, value in _engine_limits(planned, kind).items() if value is not None
    }
    if planned_limits:
        update["engine_options"] = OpenObject(**{**pool.engine_options.as_dict(), **planned_limits})
    return pool.model_copy(update=update)


def _engine_limits(planned: PlannedPool, kind: EngineKind) -> dict[str, int | None]:
    """The planned step budget and batch cap under the engine's own option names."""
    if kind is EngineKind.REFERENCE:
        # Its step budget is max_batch_tokens. It has no batch cap: a step's decode rows
        # already fit its budget, and an unknown option would stop the worker starting.
        return {"max_batch_tokens": planned.max_num_tokens}
    return {"max_num_tokens": planned.max_num_tokens, "max_batch_size": planned.max_batch_size}


def apply_cluster_plan(cluster: InferenceCluster, plan: PlanStatus | None) -> InferenceCluster:
    """``cluster`` with :func:`apply_plan` applied to its spec."""
    spec = apply_plan(cluster.spec, plan)
    return cluster if spec is cluster.spec else cluster.model_copy(update={"spec": spec})
