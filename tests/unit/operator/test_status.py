"""Status you can trust: conditions, counts and events from observations (pure)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tandem.api.v1alpha1 import InferenceCluster, InferenceClusterStatus, PoolRole
from tandem_operator import reasons
from tandem_operator.status.compute import StatusResult, compute_status, status_to_wire
from tandem_operator.status.observe import (
    Failure,
    Observed,
    PodObservation,
    PodProblem,
    PoolObservation,
    WorkloadObservation,
)

NOW = "2026-01-01T00:00:00Z"
LATER = "2026-01-01T00:05:00Z"
GPU_MESSAGE = (
    "0/9 nodes are available: 4 Insufficient nvidia.com/gpu, 5 node(s) didn't match "
    "Pod's node affinity/selector."
)


def make_cr(status: InferenceClusterStatus | None = None) -> InferenceCluster:
    return InferenceCluster.model_validate(
        {
            "metadata": {"name": "c", "namespace": "ns", "generation": 3, "uid": "u"},
            "spec": {"model": {"name": "m"}},
            "status": status.to_wire() if status else None,
        }
    )


def healthy(n: int = 1, generation: int = 1) -> WorkloadObservation:
    return WorkloadObservation(
        generation=generation, observed_generation=generation, replicas=n, ready=n, updated=n
    )


def pool(role: PoolRole, desired: int = 1, **kw: object) -> PoolObservation:
    return PoolObservation(
        role=role,
        desired=desired,
        pool_generation=1,
        workload=kw.pop("workload", healthy(desired)),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def observed(**kw: object) -> Observed:
    base = Observed(
        generation=3,
        pools={PoolRole.PREFILL: pool(PoolRole.PREFILL), PoolRole.DECODE: pool(PoolRole.DECODE)},
        frontend=healthy(),
        frontend_desired=1,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def conditions(result: StatusResult) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in result.cluster.conditions}


def test_all_pools_ready_is_ready_and_settled() -> None:
    result = compute_status(make_cr(), observed(), NOW)
    assert conditions(result) == {
        reasons.READY: ("True", reasons.CLUSTER_READY),
        reasons.PROGRESSING: ("False", reasons.UP_TO_DATE),
        reasons.DEGRADED: ("False", reasons.AS_EXPECTED),
    }
    status = result.cluster
    assert status.observed_generation == 3
    assert status.endpoint == "http://c-frontend.ns.svc:8000"
    assert status.pools.decode.ready == 1
    assert all(c.observed_generation == 3 for c in status.conditions)


@pytest.mark.parametrize(
    ("prefill", "decode", "frontend", "ready_reason", "progress_reason"),
    [
        # A pool short of ready replicas is never Ready.
        (
            pool(PoolRole.PREFILL, 2, workload=WorkloadObservation(1, 1, 2, 1, 2)),
            pool(PoolRole.DECODE),
            healthy(),
            reasons.PODS_NOT_READY,
            reasons.PODS_NOT_READY,
        ),
        # Scaling up: pods not even created yet.
        (
            pool(PoolRole.PREFILL),
            pool(PoolRole.DECODE, 3, workload=WorkloadObservation(1, 1, 1, 1, 1)),
            healthy(),
            reasons.PODS_NOT_READY,
            reasons.SCALING_UP,
        ),
        # The workload controller has not seen the new spec.
        (
            pool(PoolRole.PREFILL, workload=WorkloadObservation(2, 1, 0, 0, 0)),
            pool(PoolRole.DECODE),
            healthy(),
            reasons.PODS_NOT_READY,
            reasons.ROLLING_OUT,
        ),
        # The frontend counts too.
        (
            pool(PoolRole.PREFILL),
            pool(PoolRole.DECODE),
            WorkloadObservation(1, 1, 1, 0, 1),
            reasons.PODS_NOT_READY,
            reasons.PODS_NOT_READY,
        ),
        # No workload yet at all.
        (
            pool(PoolRole.PREFILL, workload=None),
            pool(PoolRole.DECODE),
            healthy(),
            reasons.PODS_NOT_READY,
            reasons.ROLLING_OUT,
        ),
    ],
)
def test_short_pools_are_not_ready(
    prefill: PoolObservation,
    decode: PoolObservation,
    frontend: WorkloadObservation,
    ready_reason: str,
    progress_reason: str,
) -> None:
    obs = observed(pools={PoolRole.PREFILL: prefill, PoolRole.DECODE: decode}, frontend=frontend)
    result = compute_status(make_cr(), obs, NOW)
    assert conditions(result)[reasons.READY] == ("False", ready_reason)
    assert conditions(result)[reasons.PROGRESSING] == ("True", progress_reason)


def test_rolling_update_with_capacity_intact_is_ready_and_progressing() -> None:
    rolling = WorkloadObservation(2, 2, replicas=3, ready=2, updated=1)
    obs = observed(
        pools={**observed().pools, PoolRole.DECODE: pool(PoolRole.DECODE, 2, workload=rolling)}
    )
    result = compute_status(make_cr(), obs, NOW)
    assert conditions(result)[reasons.READY] == ("True", reasons.CLUSTER_READY)
    assert conditions(result)[reasons.PROGRESSING] == ("True", reasons.ROLLING_OUT)


def test_an_empty_prefill_pool_is_fine_an_empty_decode_pool_is_not() -> None:
    empty = WorkloadObservation(1, 1, 0, 0, 0)
    no_prefill = observed(
        pools={**observed().pools, PoolRole.PREFILL: pool(PoolRole.PREFILL, 0, workload=empty)}
    )
    assert conditions(compute_status(make_cr(), no_prefill, NOW))[reasons.READY][0] == "True"
    no_decode = observed(
        pools={**observed().pools, PoolRole.DECODE: pool(PoolRole.DECODE, 0, workload=empty)}
    )
    assert conditions(compute_status(make_cr(), no_decode, NOW))[reasons.READY] == (
        "False",
        reasons.NO_DECODE_WORKERS,
    )


def test_a_decode_pool_scaled_to_zero_by_the_autoscaler_is_ready_not_degraded() -> None:
    cr = InferenceCluster.model_validate(
        {
            "metadata": {"name": "c", "namespace": "ns", "generation": 3},
            "spec": {
                "model": {"name": "m"},
                "decode": {"minReplicas": 0},
                "autoscaling": {"enabled": True},
                "frontend": {"coldStartTimeoutSeconds": 90},
            },
        }
    )
    empty = WorkloadObservation(1, 1, 0, 0, 0)
    pools = {role: pool(role, 0, workload=empty) for role in PoolRole}
    result = compute_status(cr, observed(pools=pools), NOW)
    assert conditions(result) == {
        reasons.READY: ("True", reasons.SCALED_TO_ZERO),
        reasons.PROGRESSING: ("False", reasons.UP_TO_DATE),
        reasons.DEGRADED: ("False", reasons.AS_EXPECTED),
    }
    ready = next(c for c in result.cluster.conditions if c.type == reasons.READY)
    assert "scaled to zero" in ready.message and "up to 90s" in ready.message
    # At zero the frontend still has to be there to take the first request.
    no_frontend = observed(pools=pools, frontend=WorkloadObservation(1, 1, 1, 0, 1))
    assert conditions(compute_status(cr, no_frontend, NOW))[reasons.READY][0] == "False"


def test_unschedulable_gpu_pods_make_the_cluster_degraded_with_the_scheduler_message() -> None:
    pending = PodObservation(
        "c-decode-x", problem=PodProblem(reasons.INSUFFICIENT_GPU, GPU_MESSAGE)
    )
    decode = pool(
        PoolRole.DECODE,
        4,
        workload=WorkloadObservation(1, 1, 4, 2, 4),
        pods=(PodObservation("a", ready=True), PodObservation("b", ready=True), pending, pending),
    )
    result = compute_status(
        make_cr(), observed(pools={**observed().pools, PoolRole.DECODE: decode}), NOW
    )
    cond = {c.type: c for c in result.cluster.conditions}
    assert cond[reasons.READY].status == "False"
    assert cond[reasons.READY].reason == reasons.INSUFFICIENT_GPU
    assert cond[reasons.DEGRADED].status == "True"
    assert cond[reasons.DEGRADED].reason == reasons.INSUFFICIENT_GPU
    assert "decode: 2 pod(s)" in cond[reasons.DEGRADED].message
    assert "4 Insufficient nvidia.com/gpu" in cond[reasons.DEGRADED].message
    assert result.cluster.pools.decode.model_dump() == {
        "desired": 4,
        "replicas": 4,
        "ready": 2,
        "updated": 4,
        "queue_depth": {"requests": 0, "tokens": 0},
    }
    pool_ready = result.pools[PoolRole.DECODE].conditions[0]
    assert (pool_ready.status, pool_ready.reason) == ("False", reasons.INSUFFICIENT_GPU)


def test_the_most_actionable_problem_is_reported() -> None:
    crash = PodObservation("p", problem=PodProblem(reasons.CRASH_LOOP, "back-off"))
    gpu = PodObservation("d", problem=PodProblem(reasons.INSUFFICIENT_GPU, GPU_MESSAGE))
    obs = observed(
        pools={
            PoolRole.PREFILL: pool(PoolRole.PREFILL, pods=(crash,)),
            PoolRole.DECODE: pool(PoolRole.DECODE, pods=(gpu,)),
        }
    )
    assert conditions(compute_status(make_cr(), obs, NOW))[reasons.DEGRADED] == (
        "True",
        reasons.INSUFFICIENT_GPU,
    )


def test_apply_failure_is_degraded_and_keeps_the_old_observed_generation() -> None:
    previous = compute_status(make_cr(), replace(observed(), generation=2), NOW).cluster
    failed = observed(failure=Failure(reasons.LEADER_WORKER_SET_MISSING, "install lws"))
    result = compute_status(make_cr(previous), failed, LATER)
    assert conditions(result)[reasons.READY] == ("False", reasons.LEADER_WORKER_SET_MISSING)
    assert conditions(result)[reasons.DEGRADED] == ("True", reasons.LEADER_WORKER_SET_MISSING)
    assert result.cluster.observed_generation == 2


def test_transition_times_move_only_when_the_status_changes() -> None:
    first = compute_status(make_cr(), observed(), NOW).cluster
    same = compute_status(make_cr(first), observed(), LATER).cluster
    assert [c.last_transition_time for c in same.conditions] == [NOW, NOW, NOW]
    short = observed(frontend=WorkloadObservation(1, 1, 1, 0, 1))
    changed = {c.type: c for c in compute_status(make_cr(first), short, LATER).cluster.conditions}
    assert changed[reasons.READY].last_transition_time == LATER
    assert changed[reasons.DEGRADED].last_transition_time == NOW


def events(before: InferenceClusterStatus | None, obs: Observed) -> list[tuple[str, str]]:
    return [(e.type, e.reason) for e in compute_status(make_cr(before), obs, LATER).events]


def test_events_mark_transitions_only() -> None:
    ready = compute_status(make_cr(), observed(), NOW).cluster
    not_ready_obs = observed(frontend=WorkloadObservation(1, 1, 1, 0, 1))
    not_ready = compute_status(make_cr(), not_ready_obs, NOW).cluster
    assert events(None, not_ready_obs) == []  # nothing happened yet
    assert events(None, observed()) == [("Normal", reasons.EVENT_READY)]
    assert events(ready, observed()) == []  # steady state: silence
    assert events(ready, not_ready_obs) == [("Warning", reasons.EVENT_NOT_READY)]
    assert events(not_ready, observed()) == [("Normal", reasons.EVENT_READY)]


def test_degradation_and_recovery_and_resizes_are_events() -> None:
    gpu = PodObservation("d", problem=PodProblem(reasons.INSUFFICIENT_GPU, GPU_MESSAGE))
    bigger = pool(PoolRole.DECODE, 3, workload=WorkloadObservation(1, 1, 3, 1, 3), pods=(gpu,))
    degraded_obs = observed(pools={**observed().pools, PoolRole.DECODE: bigger})
    ready = compute_status(make_cr(), observed(), NOW).cluster
    assert events(ready, degraded_obs) == [
        ("Warning", reasons.EVENT_NOT_READY),
        ("Warning", reasons.INSUFFICIENT_GPU),
        ("Normal", reasons.EVENT_POOL_RESIZED),
    ]
    degraded = compute_status(make_cr(ready), degraded_obs, NOW).cluster
    assert events(degraded, degraded_obs) == []
    assert ("Normal", reasons.EVENT_RECOVERED) in events(degraded, observed())


LOST = PodObservation("d", problem=PodProblem(reasons.CRASH_LOOP, "back-off restarting"))


@pytest.mark.parametrize(
    ("decode", "frontend", "expected"),
    [
        # The autoscaler grew decode 1 -> 2; the new pod is starting. Not a problem.
        (
            pool(PoolRole.DECODE, 2, workload=WorkloadObservation(1, 1, 2, 1, 2)),
            healthy(),
            [("Normal", reasons.EVENT_POOL_RESIZED)],
        ),
        # Grown, but the one ready pod was lost meanwhile.
        (
            pool(PoolRole.DECODE, 2, workload=WorkloadObservation(1, 1, 2, 0, 2)),
            healthy(),
            [("Warning", reasons.EVENT_NOT_READY), ("Normal", reasons.EVENT_POOL_RESIZED)],
        ),
        # Grown, and the new pod crash-loops: a problem, said with its reason.
        (
            pool(PoolRole.DECODE, 2, workload=WorkloadObservation(1, 1, 2, 1, 2), pods=(LOST,)),
            healthy(),
            [
                ("Warning", reasons.EVENT_NOT_READY),
                ("Warning", reasons.CRASH_LOOP),
                ("Normal", reasons.EVENT_POOL_RESIZED),
            ],
        ),
        # Grown, while the frontend lost its pod.
        (
            pool(PoolRole.DECODE, 2, workload=WorkloadObservation(1, 1, 2, 1, 2)),
            WorkloadObservation(1, 1, 1, 0, 1),
            [("Warning", reasons.EVENT_NOT_READY), ("Normal", reasons.EVENT_POOL_RESIZED)],
        ),
        # Same size, a pod lost: a Warning.
        (
            pool(PoolRole.DECODE, 1, workload=WorkloadObservation(1, 1, 1, 0, 1)),
            healthy(),
            [("Warning", reasons.EVENT_NOT_READY)],
        ),
    ],
)
def test_a_scale_up_is_no_warning_but_a_loss_is(
    decode: PoolObservation, frontend: WorkloadObservation, expected: list[tuple[str, str]]
) -> None:
    ready = compute_status(make_cr(), observed(), NOW).cluster
    obs = observed(pools={**observed().pools, PoolRole.DECODE: decode}, frontend=frontend)
    assert events(ready, obs) == expected


@pytest.mark.parametrize(
    ("decode", "progressing"),
    [
        # The spec was refused before anything existed: nothing is in flight.
        (pool(PoolRole.DECODE, workload=None), ("False", reasons.LEADER_WORKER_SET_MISSING)),
        # What exists still rolls out (an earlier generation's change).
        (
            pool(PoolRole.DECODE, workload=WorkloadObservation(2, 1, 1, 1, 1)),
            ("True", reasons.ROLLING_OUT),
        ),
    ],
)
def test_a_refused_spec_is_not_progressing_unless_something_that_exists_is(
    decode: PoolObservation, progressing: tuple[str, str]
) -> None:
    failure = Failure(reasons.LEADER_WORKER_SET_MISSING, "install lws")
    obs = observed(pools={**observed().pools, PoolRole.DECODE: decode}, failure=failure)
    assert conditions(compute_status(make_cr(), obs, NOW))[reasons.PROGRESSING] == progressing


def test_pool_status_feeds_the_scale_subresource() -> None:
    result = compute_status(make_cr(), observed(), NOW)
    decode = result.pools[PoolRole.DECODE]
    assert decode.selector == "tandem.dev/cluster=c,tandem.dev/role=decode"
    assert (decode.replicas, decode.ready_replicas, decode.desired_replicas) == (1, 1, 1)
    assert decode.observed_generation == 1


def test_status_wire_form_leaves_autoscaler_fields_alone() -> None:
    wire = status_to_wire(compute_status(make_cr(), observed(), NOW).cluster)
    assert "queueDepth" not in wire["pools"]["decode"]
    assert wire["pools"]["decode"] == {"desired": 1, "replicas": 1, "ready": 1, "updated": 1}
    pool_wire = status_to_wire(compute_status(make_cr(), observed(), NOW).pools[PoolRole.DECODE])
    assert "queueDepth" not in pool_wire
    assert "lastScaleTime" not in pool_wire
