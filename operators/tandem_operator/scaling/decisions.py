"""The autoscaler's pure half: cluster objects in, observations and API bodies out.

Nothing here talks to the API server or reads a clock; ``autoscaler.py`` is the shell.

Writes the autoscaler makes, each under its own field manager (``tandem-autoscaler``)
so the operator's own applies never clobber them and vice versa:

- ``WorkerPool /scale``: a merge patch of ``spec.replicas`` (what HPA writes too);
- ``WorkerPool status``: ``queueDepth``, ``lastScaleTime``, ``lastScaleReason``;
- ``InferenceCluster status``: ``pools.{prefill,decode}.queueDepth``;
- pods of a pool being shrunk: ``controller.kubernetes.io/pod-deletion-cost``, so the
  ReplicaSet controller removes exactly the workers :func:`choose_victims` picked.

``pools.*.desired`` and every condition stay the operator's: it derives ``desired`` from
the WorkerPool, and asks :func:`compute_scaling_condition` for ``ScalingLimited``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tandem.api.v1alpha1 import (
    AutoscalingMode,
    Condition,
    InferenceCluster,
    PoolRole,
)
from tandem.autoscale import (
    LimitedBy,
    LoadSample,
    PoolCounts,
    ScaleDecision,
    ScaleReason,
    WorkerLoad,
    choose_victims,
    compute_pod_deletion_costs,
)
from tandem_operator import names, reasons
from tandem_operator.kube.client import INFERENCE_CLUSTERS, WORKER_POOLS
from tandem_operator.render.children import render_deletion_cost_patch
from tandem_operator.status.compute import EventRecord
from tandem_operator.status.observe import observe_pod

Manifest = dict[str, Any]

AUTOSCALER_FIELD_MANAGER = "tandem-autoscaler"
# Below every survivor's cost (>= 0, the default of a pod without the annotation).
VICTIM_DELETION_COST = -1

SCHEDULING_PROBLEMS = frozenset(
    {
        reasons.INSUFFICIENT_GPU,
        reasons.INSUFFICIENT_CPU,
        reasons.INSUFFICIENT_MEMORY,
        reasons.NO_MATCHING_NODES,
        reasons.UNSCHEDULABLE,
    }
)


def autoscaler_runs(cr: InferenceCluster) -> bool:
    """Only ``builtin`` mode is ours; ``external`` leaves replicas to HPA/KEDA."""
    autoscaling = cr.spec.autoscaling
    return autoscaling.enabled and autoscaling.mode is AutoscalingMode.BUILTIN


def pool_pods(pods: Sequence[Manifest], role: PoolRole) -> list[Manifest]:
    """The pool's pods that are not on their way out."""
    return [
        p
        for p in pods
        if (p["metadata"].get("labels") or {}).get(names.LABEL_ROLE) == role.value
        and not p["metadata"].get("deletionTimestamp")
    ]


def compute_pool_counts(pool: Manifest, pods: Sequence[Manifest]) -> PoolCounts:
    """``current`` is the WorkerPool's ``spec.replicas`` (the /scale target); ``ready``
    and ``unschedulable`` come from its live pods; the rest of ``current`` is starting
    (created, or not even created yet by the workload controller)."""
    current = int((pool.get("spec") or {}).get("replicas", 0))
    observed = [observe_pod(p) for p in pods]
    ready = sum(1 for o in observed if o.ready)
    unschedulable = sum(
        1 for o in observed if o.problem is not None and o.problem.reason in SCHEDULING_PROBLEMS
    )
    starting = max(0, current - ready)
    return PoolCounts(
        current=current,
        ready=min(ready, current),
        starting=starting,
        unschedulable=min(unschedulable, starting),
    )


def compute_pod_loads(
    pods: Sequence[Manifest], worker_loads: Mapping[str, WorkerLoad]
) -> list[WorkerLoad]:
    """Each pod as the drain choice sees it, keyed by pod name: readiness from the pod,
    in-flight work from the frontends' view of the worker at the pod's IP (none known:
    idle)."""
    by_host = {_host(address): load for address, load in worker_loads.items()}
    out = []
    for pod in pods:
        name = pod["metadata"]["name"]
        ready = observe_pod(pod).ready
        seen = by_host.get((pod.get("status") or {}).get("podIP") or "")
        if seen is None:
            out.append(WorkerLoad(key=name, ready=ready))
            continue
        out.append(
            WorkerLoad(
                key=name,
                ready=ready and seen.ready,
                draining=seen.draining,
                active_sequences=seen.active_sequences,
                queued_requests=seen.queued_requests,
                queued_tokens=seen.queued_tokens,
            )
        )
    return out


def _host(address: str) -> str:
    host, _, _ = address.rpartition(":")
    return host.strip("[]")


def compute_deletion_costs(loads: Sequence[WorkerLoad], remove: int) -> dict[str, int]:
    """``pod-deletion-cost`` for every pod of a pool about to lose ``remove`` replicas:
    the victims :func:`choose_victims` picks get a cost below every survivor's, the
    survivors a cost that grows with their work (for the next scale-down)."""
    victims = set(choose_victims(loads, remove))
    costs = compute_pod_deletion_costs([w for w in loads if w.key not in victims])
    costs.update(dict.fromkeys(victims, VICTIM_DELETION_COST))
    return costs


def render_deletion_cost_patches(
    pods: Sequence[Manifest], costs: Mapping[str, int]
) -> list[tuple[str, Manifest]]:
    """(pod name, merge patch) for each pod whose annotation differs from its cost."""
    out = []
    for pod in pods:
        name = pod["metadata"]["name"]
        if name not in costs:
            continue
        current = (pod["metadata"].get("annotations") or {}).get(names.ANNOTATION_DELETION_COST)
        if current != str(costs[name]):
            out.append((name, render_deletion_cost_patch(costs[name])))
    return out


def render_scale_patch(replicas: int) -> Manifest:
    """Merge patch for ``WorkerPool/<name>/scale`` (an autoscaling/v1 Scale)."""
    return {"spec": {"replicas": replicas}}


def _queue_depth(sample: LoadSample) -> Manifest:
    return {"requests": sample.queued_requests, "tokens": sample.queued_tokens}


def render_pool_scaling_status(
    namespace: str,
    pool_name: str,
    sample: LoadSample,
    *,
    last_scale_time: str | None,
    last_scale_reason: str | None,
) -> Manifest:
    """Server-side apply body for the autoscaler's fields of a WorkerPool's status."""
    status: Manifest = {"queueDepth": _queue_depth(sample)}
    if last_scale_time is not None:
        status["lastScaleTime"] = last_scale_time
    if last_scale_reason is not None:
        status["lastScaleReason"] = last_scale_reason
    return {
        "apiVersion": WORKER_POOLS.api_version,
        "kind": WORKER_POOLS.kind,
        "metadata": {"name": pool_name, "namespace": namespace},
        "status": status,
    }


def render_cluster_queue_status(
    cr: InferenceCluster, samples: Mapping[PoolRole, LoadSample]
) -> Manifest:
    """Server-side apply body for ``status.pools.*.queueDepth`` of an InferenceCluster."""
    return {
        "apiVersion": INFERENCE_CLUSTERS.api_version,
        "kind": INFERENCE_CLUSTERS.kind,
        "metadata": {"name": cr.metadata.name, "namespace": cr.metadata.namespace or "default"},
        "status": {
            "pools": {role.value: {"queueDepth": _queue_depth(s)} for role, s in samples.items()}
        },
    }


def describe(role: PoolRole, message: str) -> str:
    """``message`` prefixed with the pool's name once (the policy's own messages already
    start with it)."""
    prefix = f"{role.value}: "
    return message if message.startswith(prefix) else prefix + message


def render_scale_message(role: PoolRole, decision: ScaleDecision) -> str:
    """What a scale says in its Event and log line: ``prefill: 1 -> 3: <the numbers>``."""
    numbers = decision.message.removeprefix(f"{role.value}: ")
    return f"{role.value}: {decision.current} -> {decision.desired}: {numbers}"


def compute_limit(decision: ScaleDecision) -> tuple[str, str] | None:
    """(reason, message) when the pool needs more replicas than it may have: held by
    pending pods (Unschedulable) or capped by maxReplicas. None otherwise."""
    if decision.limited_by is LimitedBy.UNSCHEDULABLE:
        return ScaleReason.UNSCHEDULABLE.value, decision.message
    capped = decision.limited_by is LimitedBy.MAX_REPLICAS and decision.direction >= 0
    if decision.reason is ScaleReason.AT_MAX_REPLICAS or capped:
        return ScaleReason.AT_MAX_REPLICAS.value, decision.message
    return None


def compute_scaling_condition(
    decisions: Mapping[PoolRole, ScaleDecision],
    *,
    previous: Sequence[Condition],
    generation: int,
    now: str,
) -> Condition:
    """The ``ScalingLimited`` condition from each pool's latest decision. Unschedulable
    outranks AtMaxReplicas (it needs capacity, not a spec change)."""
    limits = [(role, limit) for role, d in decisions.items() if (limit := compute_limit(d))]
    limits.sort(key=lambda item: item[1][0] != ScaleReason.UNSCHEDULABLE.value)
    if limits:
        role, (reason, message) = limits[0]
        status, message = "True", describe(role, message)
    else:
        status, reason = "False", reasons.DESIRED_WITHIN_RANGE
        message = "every pool is sized by its load"
    return _condition(reasons.SCALING_LIMITED, status, reason, message, previous, generation, now)


def compute_active_condition(
    problem: tuple[str, str] | None,
    *,
    previous: Sequence[Condition],
    generation: int,
    now: str,
) -> Condition:
    """``ScalingActive``: True while the autoscaler reads the cluster's load; False with
    ``problem`` (reason, message: why not and what to do) while it cannot."""
    if problem is None:
        status, reason, message = "True", reasons.METRICS_AVAILABLE, "reading the router metrics"
    else:
        status, (reason, message) = "False", problem
    return _condition(reasons.SCALING_ACTIVE, status, reason, message, previous, generation, now)


def _condition(
    kind: str,
    status: str,
    reason: str,
    message: str,
    previous: Sequence[Condition],
    generation: int,
    now: str,
) -> Condition:
    before = next((c for c in previous if c.type == kind), None)
    since = before.last_transition_time if before and before.status == status else now
    return Condition(
        type=kind,
        status=status,
        reason=reason,
        message=message[:1024],
        last_transition_time=since,
        observed_generation=generation,
    )


# ScalingActive=False reasons worth a Warning Event (a frontend not ready yet is how
# every cluster starts).
_INACTIVE_WARNINGS = frozenset({reasons.NO_METRICS_SOURCE, reasons.METRICS_UNAVAILABLE})


def compute_scaling_events(
    previous: Sequence[Condition], conditions: Sequence[Condition]
) -> list[EventRecord]:
    """Warning Events for the autoscaler's conditions turning bad: ScalingLimited=True, or
    ScalingActive=False for a reason someone must act on; once per reason."""
    events = []
    for condition in conditions:
        before = next((c for c in previous if c.type == condition.type), None)
        turned = before is None or (before.status, before.reason) != (
            condition.status,
            condition.reason,
        )
        if not turned:
            continue
        if condition.type == reasons.SCALING_LIMITED and condition.status == "True":
            message = f"{condition.reason}: {condition.message}"
            events.append(EventRecord("Warning", reasons.SCALING_LIMITED, message))
        elif condition.type == reasons.SCALING_ACTIVE and condition.reason in _INACTIVE_WARNINGS:
            events.append(EventRecord("Warning", condition.reason, condition.message))
    return events


def render_event(
    cr: InferenceCluster,
    *,
    type_: str,
    reason: str,
    message: str,
    now: str,
    identity: str,
) -> Manifest:
    """A core/v1 Event on the InferenceCluster (``kubectl describe ic`` shows it)."""
    namespace = cr.metadata.namespace or "default"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{cr.metadata.name}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": cr.api_version,
            "kind": "InferenceCluster",
            "name": cr.metadata.name,
            "namespace": namespace,
            "uid": cr.metadata.uid,
        },
        "reason": reason,
        "message": message[:1024],
        "type": type_,
        "source": {"component": AUTOSCALER_FIELD_MANAGER},
        "reportingComponent": AUTOSCALER_FIELD_MANAGER,
        "reportingInstance": identity[:128],
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
