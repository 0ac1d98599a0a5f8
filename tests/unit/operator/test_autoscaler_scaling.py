"""The autoscaler's pure half: counts from pods, victims' annotations, API bodies,
ScalingLimited, and where metrics are read from."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tandem.api.v1alpha1 import Condition, InferenceCluster, PoolRole
from tandem.autoscale import (
    LimitedBy,
    LoadSample,
    LoadSignal,
    PoolCounts,
    ScaleDecision,
    ScaleReason,
    WorkerLoad,
)
from tandem_operator import names, reasons
from tandem_operator.scaling.decisions import (
    AUTOSCALER_FIELD_MANAGER,
    VICTIM_DELETION_COST,
    autoscaler_runs,
    compute_active_condition,
    compute_deletion_costs,
    compute_pod_loads,
    compute_pool_counts,
    compute_scaling_condition,
    compute_scaling_events,
    pool_pods,
    render_cluster_queue_status,
    render_deletion_cost_patches,
    render_event,
    render_pool_scaling_status,
    render_scale_message,
    render_scale_patch,
)
from tandem_operator.scaling.metrics_source import (
    FrontendTarget,
    compute_frontend_targets,
    no_source_message,
    parse_url_overrides,
)

Json = dict[str, Any]
NOW, LATER = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"
GPU_PENDING = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."


def cluster(**autoscaling: Any) -> InferenceCluster:
    return InferenceCluster.model_validate(
        {
            "metadata": {"name": "c", "namespace": "ns", "generation": 2, "uid": "u1"},
            "spec": {"model": {"name": "m"}, "autoscaling": autoscaling},
        }
    )


def pod(
    name: str,
    *,
    role: str = "decode",
    ready: bool = True,
    ip: str | None = None,
    pending: str | None = None,
    cost: int | None = None,
    deleting: bool = False,
) -> Json:
    conditions: list[Json] = [{"type": "Ready", "status": "True" if ready else "False"}]
    if pending:
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": pending,
            }
        )
    meta: Json = {"name": name, "namespace": "ns", "labels": {names.LABEL_ROLE: role}}
    if cost is not None:
        meta["annotations"] = {names.ANNOTATION_DELETION_COST: str(cost)}
    if deleting:
        meta["deletionTimestamp"] = NOW
    status: Json = {"conditions": conditions}
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "status": status}


def decision(
    current: int,
    desired: int,
    reason: ScaleReason,
    limited_by: LimitedBy = LimitedBy.NONE,
    recommended: int | None = None,
) -> ScaleDecision:
    return ScaleDecision(
        desired=desired,
        current=current,
        recommended=desired if recommended is None else recommended,
        reason=reason,
        limited_by=limited_by,
        signal=LoadSignal.QUEUED_TOKENS,
        message=f"{reason.value} message",
    )


# --------------------------------------------------------------------------- who runs


@pytest.mark.parametrize(
    ("autoscaling", "runs"),
    [
        ({"enabled": True, "mode": "builtin"}, True),
        ({"enabled": True, "mode": "external"}, False),  # HPA/KEDA own replicas
        ({"enabled": False, "mode": "builtin"}, False),
    ],
)
def test_only_enabled_builtin_clusters_get_a_loop(autoscaling: Json, runs: bool) -> None:
    assert autoscaler_runs(cluster(**autoscaling)) is runs


# --------------------------------------------------------------------------- counts


def test_counts_come_from_the_pool_size_and_its_live_pods() -> None:
    pods = [
        pod("d-1"),
        pod("d-2"),
        pod("d-3", ready=False, pending=GPU_PENDING),
        pod("d-4", ready=False),  # scheduled, starting
        pod("d-5", deleting=True),  # leaving: not counted
        pod("p-1", role="prefill"),
    ]
    counts = compute_pool_counts({"spec": {"replicas": 5}}, pool_pods(pods, PoolRole.DECODE))
    assert counts == PoolCounts(current=5, ready=2, starting=3, unschedulable=1)


def test_pods_not_created_yet_count_as_starting() -> None:
    counts = compute_pool_counts({"spec": {"replicas": 4}}, [pod("d-1")])
    assert (counts.ready, counts.starting, counts.unschedulable) == (1, 3, 0)


# --------------------------------------------------------------------------- victims


def test_pod_loads_join_the_frontends_view_by_pod_ip() -> None:
    pods = [pod("d-1", ip="10.0.0.1"), pod("d-2", ip="10.0.0.2"), pod("d-3")]
    seen = {
        "10.0.0.1:50051": WorkerLoad(key="10.0.0.1:50051", ready=True, active_sequences=4),
        "10.0.0.2:50051": WorkerLoad(key="10.0.0.2:50051", ready=True, draining=True),
    }
    loads = {w.key: w for w in compute_pod_loads(pods, seen)}
    assert loads["d-1"].in_flight == 4 and loads["d-1"].ready
    assert loads["d-2"].draining
    assert loads["d-3"] == WorkerLoad(key="d-3", ready=True)  # unknown to the router: idle


def test_victims_get_the_lowest_deletion_cost_and_survivors_their_load() -> None:
    loads = [
        WorkerLoad(key="busy", active_sequences=9),
        WorkerLoad(key="light", active_sequences=1),
        WorkerLoad(key="idle"),
        WorkerLoad(key="cold", ready=False),
    ]
    costs = compute_deletion_costs(loads, remove=2)
    victims = {k for k, v in costs.items() if v == VICTIM_DELETION_COST}
    assert victims == {"cold", "idle"}  # nothing to finish there
    assert costs["busy"] > costs["light"] > VICTIM_DELETION_COST
    assert min(costs[k] for k in ("busy", "light")) > max(costs[k] for k in victims)


def test_a_busy_pool_sheds_its_least_loaded_worker() -> None:
    loads = [WorkerLoad(key=f"w{i}", active_sequences=n) for i, n in enumerate((5, 2, 7))]
    costs = compute_deletion_costs(loads, remove=1)
    assert [k for k, v in costs.items() if v == VICTIM_DELETION_COST] == ["w1"]


def test_only_pods_whose_annotation_differs_are_patched() -> None:
    pods = [pod("a", cost=VICTIM_DELETION_COST), pod("b", cost=5), pod("c")]
    patches = render_deletion_cost_patches(pods, {"a": VICTIM_DELETION_COST, "b": 7, "c": 0})
    assert patches == [
        ("b", {"metadata": {"annotations": {names.ANNOTATION_DELETION_COST: "7"}}}),
        ("c", {"metadata": {"annotations": {names.ANNOTATION_DELETION_COST: "0"}}}),
    ]


# --------------------------------------------------------------------------- bodies


def test_scale_and_status_bodies() -> None:
    assert render_scale_patch(3) == {"spec": {"replicas": 3}}
    sample = LoadSample(at=0.0, queued_requests=2, queued_tokens=65_536)
    body = render_pool_scaling_status(
        "ns", "c-prefill", sample, last_scale_time=NOW, last_scale_reason="QueuedTokensAboveTarget"
    )
    assert body == {
        "apiVersion": "tandem.dev/v1alpha1",
        "kind": "WorkerPool",
        "metadata": {"name": "c-prefill", "namespace": "ns"},
        "status": {
            "queueDepth": {"requests": 2, "tokens": 65_536},
            "lastScaleTime": NOW,
            "lastScaleReason": "QueuedTokensAboveTarget",
        },
    }
    # Before any scale only the queue is written: no empty fields to own.
    quiet = render_pool_scaling_status(
        "ns", "c-prefill", sample, last_scale_time=None, last_scale_reason=None
    )
    assert set(quiet["status"]) == {"queueDepth"}
    cr = render_cluster_queue_status(cluster(), {PoolRole.DECODE: sample})
    assert cr["status"] == {"pools": {"decode": {"queueDepth": {"requests": 2, "tokens": 65_536}}}}
    assert cr["metadata"] == {"name": "c", "namespace": "ns"}


def test_events_point_at_the_cluster() -> None:
    event = render_event(
        cluster(), type_="Normal", reason="QueuedTokensAboveTarget", message="x" * 2000,
        now=NOW, identity="op-1",
    )  # fmt: skip
    assert event["involvedObject"] == {
        "apiVersion": "tandem.dev/v1alpha1",
        "kind": "InferenceCluster",
        "name": "c",
        "namespace": "ns",
        "uid": "u1",
    }
    assert event["reportingComponent"] == AUTOSCALER_FIELD_MANAGER
    assert len(event["message"]) == 1024


# --------------------------------------------------------------------------- ScalingLimited


def test_a_held_scale_up_is_reported_and_unschedulable_wins() -> None:
    decisions = {
        PoolRole.PREFILL: decision(8, 8, ScaleReason.AT_MAX_REPLICAS, LimitedBy.MAX_REPLICAS),
        PoolRole.DECODE: decision(4, 4, ScaleReason.UNSCHEDULABLE, LimitedBy.UNSCHEDULABLE, 6),
    }
    condition = compute_scaling_condition(decisions, previous=[], generation=2, now=NOW)
    assert (condition.type, condition.status, condition.reason) == (
        reasons.SCALING_LIMITED,
        "True",
        "Unschedulable",
    )
    assert condition.message.startswith("decode: ")
    assert condition.observed_generation == 2


def test_scaling_limited_keeps_its_transition_time_while_unchanged() -> None:
    calm = {PoolRole.DECODE: decision(2, 3, ScaleReason.ACTIVE_SEQUENCES_ABOVE_TARGET)}
    first = compute_scaling_condition(calm, previous=[], generation=1, now=NOW)
    assert (first.status, first.reason) == ("False", reasons.DESIRED_WITHIN_RANGE)
    again = compute_scaling_condition(calm, previous=[first], generation=1, now=LATER)
    assert again.last_transition_time == NOW
    capped = {PoolRole.DECODE: decision(7, 8, ScaleReason.ACTIVE_SEQUENCES_ABOVE_TARGET,
                                        LimitedBy.MAX_REPLICAS, 8)}  # fmt: skip
    flipped = compute_scaling_condition(capped, previous=[again], generation=1, now=LATER)
    assert (flipped.status, flipped.reason, flipped.last_transition_time) == (
        "True",
        "AtMaxReplicas",
        LATER,
    )


def test_a_scale_down_clamped_by_a_lowered_max_is_not_a_limit() -> None:
    shrinking = {PoolRole.DECODE: decision(9, 8, ScaleReason.ABOVE_MAX_REPLICAS,
                                           LimitedBy.MAX_REPLICAS)}  # fmt: skip
    condition = compute_scaling_condition(shrinking, previous=[], generation=1, now=NOW)
    assert condition.status == "False"


def test_previous_conditions_of_other_types_do_not_matter() -> None:
    ready = Condition(type="Ready", status="True", reason="R", last_transition_time=NOW)
    calm = {PoolRole.PREFILL: decision(1, 1, ScaleReason.WITHIN_TOLERANCE)}
    condition = compute_scaling_condition(calm, previous=[ready], generation=1, now=LATER)
    assert condition.last_transition_time == LATER


@pytest.mark.parametrize(
    ("role", "policy_message", "event"),
    [
        (PoolRole.PREFILL, "prefill: 9000 pending prompt tokens = 2.40 replicas of work",
         "prefill: 1 -> 3: 9000 pending prompt tokens = 2.40 replicas of work"),
        (PoolRole.DECODE, "no prefix of its own", "decode: 1 -> 3: no prefix of its own"),
    ],
)  # fmt: skip
def test_a_scale_names_the_pool_then_the_step_then_the_numbers(
    role: PoolRole, policy_message: str, event: str
) -> None:
    step = replace(decision(1, 3, ScaleReason.QUEUED_TOKENS_ABOVE_TARGET), message=policy_message)
    assert render_scale_message(role, step) == event


def condition(kind: str, status: str, reason: str) -> Condition:
    return Condition(type=kind, status=status, reason=reason, last_transition_time=NOW)


ACTIVE, LIMITED = reasons.SCALING_ACTIVE, reasons.SCALING_LIMITED


@pytest.mark.parametrize(
    ("previous", "now", "events"),
    [
        # Out of the cluster with no metrics URL: one Warning, with the condition's reason.
        ([], [condition(ACTIVE, "False", reasons.NO_METRICS_SOURCE)],
         [("Warning", reasons.NO_METRICS_SOURCE)]),
        ([condition(ACTIVE, "False", reasons.NO_METRICS_SOURCE)],
         [condition(ACTIVE, "False", reasons.NO_METRICS_SOURCE)], []),  # already said
        ([condition(ACTIVE, "False", reasons.NO_METRICS_SOURCE)],
         [condition(ACTIVE, "False", reasons.METRICS_UNAVAILABLE)],
         [("Warning", reasons.METRICS_UNAVAILABLE)]),
        # A frontend that is not ready yet is how every cluster starts: no Warning.
        ([], [condition(ACTIVE, "False", reasons.NO_READY_FRONTEND)], []),
        ([], [condition(ACTIVE, "True", reasons.METRICS_AVAILABLE)], []),
        ([], [condition(LIMITED, "True", "AtMaxReplicas")], [("Warning", LIMITED)]),
        ([condition(LIMITED, "True", "AtMaxReplicas")],
         [condition(LIMITED, "True", "AtMaxReplicas")], []),
        ([], [condition(LIMITED, "False", reasons.DESIRED_WITHIN_RANGE)], []),
    ],
)  # fmt: skip
def test_the_autoscalers_conditions_warn_once_when_they_turn_bad(
    previous: list[Condition], now: list[Condition], events: list[tuple[str, str]]
) -> None:
    assert [(e.type, e.reason) for e in compute_scaling_events(previous, now)] == events


def test_scaling_active_says_why_not_and_keeps_its_transition_time() -> None:
    problem = (reasons.NO_METRICS_SOURCE, no_source_message(cluster()))
    off = compute_active_condition(problem, previous=[], generation=2, now=NOW)
    assert (off.type, off.status, off.reason) == (ACTIVE, "False", reasons.NO_METRICS_SOURCE)
    assert off.message == (
        "the operator runs outside the cluster, where frontend pods cannot be reached: run it "
        "with --frontend-metrics-url ns/c=http://127.0.0.1:9091 (e.g. through `kubectl "
        "port-forward -n ns deploy/c-frontend 9091`, the frontend's metrics port) or *=URL; "
        "until then the pools keep their size"
    )
    still = compute_active_condition(problem, previous=[off], generation=2, now=LATER)
    assert still.last_transition_time == NOW
    on = compute_active_condition(None, previous=[still], generation=2, now=LATER)
    assert (on.status, on.reason, on.last_transition_time) == (
        "True",
        reasons.METRICS_AVAILABLE,
        LATER,
    )


# --------------------------------------------------------------------------- metrics source


def test_url_overrides_parse_and_reject_typos() -> None:
    parsed = parse_url_overrides(["ns/c=http://127.0.0.1:8000/metrics", "*=http://h:1/"])
    assert parsed == {"ns/c": "http://127.0.0.1:8000", "*": "http://h:1"}
    for bad in ("ns/c", "c=http://h:1", "ns/c=ftp://h", "a/b/c=http://h:1"):
        with pytest.raises(ValueError):
            parse_url_overrides([bad])


def test_frontends_are_scraped_by_pod_ip_unless_overridden() -> None:
    cr = cluster()
    pods = [
        pod("f-1", role="frontend", ip="10.0.0.7"),
        pod("f-2", role="frontend", ip="fd00::7"),
        pod("f-3", role="frontend", ip="10.0.0.8", ready=False),  # not serving: skip
        pod("f-4", role="frontend"),  # no IP yet
    ]
    # /metrics on the metrics port (never served on the API port), /readyz on the API's.
    assert compute_frontend_targets(cr, pods, {}, scrape_pods=True) == [
        FrontendTarget(metrics="http://10.0.0.7:9091", api="http://10.0.0.7:8000"),
        FrontendTarget(metrics="http://[fd00::7]:9091", api="http://[fd00::7]:8000"),
    ]
    wildcard = {"*": "http://127.0.0.1:9"}
    assert compute_frontend_targets(cr, pods, wildcard, scrape_pods=True) == [
        FrontendTarget.single("http://127.0.0.1:9")
    ]
    named = {"ns/c": "http://127.0.0.1:1", "*": "http://127.0.0.1:2"}
    assert compute_frontend_targets(cr, pods, named, scrape_pods=True) == [
        FrontendTarget.single("http://127.0.0.1:1")
    ]
    assert compute_frontend_targets(cr, [], {"other/c": "http://x:1"}, scrape_pods=True) == []


def test_out_of_cluster_pod_ips_are_never_dialled() -> None:
    pods = [pod("f-1", role="frontend", ip="198.18.0.7")]
    assert compute_frontend_targets(cluster(), pods, {}, scrape_pods=False) == []
    override = {"*": "http://127.0.0.1:9"}
    assert compute_frontend_targets(cluster(), pods, override, scrape_pods=False) == [
        FrontendTarget.single("http://127.0.0.1:9")
    ]
