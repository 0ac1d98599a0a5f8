"""``compute_status(cr, observed, now) -> StatusResult`` (pure).

The rules, in the order a user relies on them:

- **Ready** is True only when the frontend and every pool have at least their desired
  number of ready replicas, the decode pool is not empty, and the latest spec was applied.
  Never Ready while a pool is short. A decode pool the autoscaler scaled to zero
  (``decode.minReplicas: 0``) is not a fault: Ready stays True with reason
  ``ScaledToZero``, since the frontend takes requests and starts a worker for them.
- **Degraded** is True when something outside the operator's reach blocks progress: pods
  the scheduler refuses (``InsufficientGPU`` ...), images that do not pull, crash loops, an
  invalid spec or a failed apply. Its message carries the scheduler's own words.
- **Progressing** is True while a rollout or a scale is in flight. When the latest spec
  was not applied (``observed.failure``), nothing of it is in flight: only workloads that
  exist can be progressing, and otherwise Progressing is False with the failure's reason.
- **SloPredicted** (``planning.mode`` check or auto) says whether the planner predicts
  ``spec.slo`` to hold, naming each percentile that misses; Unknown while planning or
  when no plan could be made (``status/slo.py``). Informational; it never blocks Ready.
- **NVLinkLocal** (profiles with NVLink domains, GB200) is True when every scheduled
  worker of the cluster sits in one NVLink domain and False
  (``SplitAcrossNVLinkDomains``) when they span several: KV between domains moves over
  RDMA instead of NVLink. Informational; it never blocks Ready.

Condition times only move when a condition's status changes; Events are derived from the
transitions and emitted by the caller *after* the status is persisted. Ready turning False
only because a pool grew (a scale-up whose new pods are not ready yet) is no Warning: the
``PoolResized`` Event says what happened.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tandem.api.v1alpha1 import (
    Condition,
    InferenceCluster,
    InferenceClusterPools,
    InferenceClusterStatus,
    PoolRole,
    PoolStatus,
    WorkerPoolStatus,
)
from tandem.frontend.config import cold_start_timeout
from tandem_operator import names, reasons
from tandem_operator.render.children import pool_selector
from tandem_operator.render.placement import NvlinkPlacement
from tandem_operator.status.observe import (
    Observed,
    PodObservation,
    PodProblem,
    PoolObservation,
    WorkloadObservation,
)
from tandem_operator.status.slo import (
    compute_plan_event,
    compute_replan_event,
    compute_slo_condition,
)

# A WorkerPool's Ready message: "<ready>/<desired> ready", then this and the problem.
POOL_PROBLEM_SEPARATOR = " ready: "
# Most actionable first: when several pods fail differently, the status names this one.
PROBLEM_PRIORITY: tuple[str, ...] = (
    reasons.VOLUME_MISSING,
    reasons.INSUFFICIENT_GPU,
    reasons.INSUFFICIENT_RDMA,
    reasons.INSUFFICIENT_CPU,
    reasons.INSUFFICIENT_MEMORY,
    reasons.NO_MATCHING_NODES,
    reasons.UNSCHEDULABLE,
    reasons.IMAGE_PULL_FAILED,
    reasons.CRASH_LOOP,
    reasons.GROUP_DOWN,
)


@dataclass(frozen=True, slots=True)
class EventRecord:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class StatusResult:
    cluster: InferenceClusterStatus
    pools: Mapping[PoolRole, WorkerPoolStatus]
    events: tuple[EventRecord, ...]


@dataclass(frozen=True, slots=True)
class _Assessment:
    """One component (a pool or the frontend) judged against its desired size."""

    label: str
    desired: int
    replicas: int
    ready: int
    updated: int
    current: bool
    problem: PodProblem | None
    problem_pods: int
    exists: bool = True  # its workload (Deployment/LeaderWorkerSet) has been seen

    @property
    def short(self) -> bool:
        return self.ready < self.desired

    @property
    def progress_reason(self) -> str | None:
        if not self.current:
            return reasons.ROLLING_OUT
        if self.replicas < self.desired:
            return reasons.SCALING_UP
        if self.updated < self.desired:
            return reasons.ROLLING_OUT
        if self.replicas > self.desired:
            return reasons.SCALING_DOWN
        if self.short:
            return reasons.PODS_NOT_READY
        return None


def _worst_problem(pods: tuple[PodObservation, ...]) -> tuple[PodProblem | None, int]:
    problems = [p.problem for p in pods if p.problem is not None]
    if not problems:
        return None, 0
    problems.sort(key=lambda p: PROBLEM_PRIORITY.index(p.reason))
    return problems[0], len(problems)


def _assess(
    label: str,
    desired: int,
    workload: WorkloadObservation | None,
    pods: tuple[PodObservation, ...],
) -> _Assessment:
    problem, count = _worst_problem(pods)
    if workload is None:
        return _Assessment(label, desired, 0, 0, 0, desired == 0, problem, count, exists=False)
    return _Assessment(
        label,
        desired,
        workload.replicas,
        workload.ready,
        workload.updated,
        workload.current,
        problem,
        count,
    )


def _remember_group_down(part: _Assessment, previous: WorkerPoolStatus | None) -> _Assessment:
    """A pool stays down for the group exit that took it down until it is whole again:
    the LeaderWorkerSet deletes the group's pods, exited one included, and the new ones
    say nothing of why."""
    if part.problem is not None or not part.short or previous is None:
        return part
    before = _find(list(previous.conditions), reasons.READY)
    if before is None or before.reason != reasons.GROUP_DOWN:
        return part
    _, _, message = before.message.partition(POOL_PROBLEM_SEPARATOR)
    return dataclasses.replace(part, problem=PodProblem(reasons.GROUP_DOWN, message))


def _condition(
    kind: str,
    status: bool | str,  # a bool, or "Unknown"
    reason: str,
    message: str,
    *,
    previous: list[Condition],
    generation: int,
    now: str,
) -> Condition:
    value = status if isinstance(status, str) else ("True" if status else "False")
    before = next((c for c in previous if c.type == kind), None)
    since = before.last_transition_time if before and before.status == value else now
    return Condition(
        type=kind,
        status=value,
        reason=reason,
        message=message,
        last_transition_time=since,
        observed_generation=generation,
    )


def _summary(parts: list[_Assessment]) -> str:
    return ", ".join(f"{a.label} {a.ready}/{a.desired} ready" for a in parts)


def _degraded(observed: Observed, parts: list[_Assessment]) -> tuple[str, str] | None:
    if observed.failure is not None:
        return observed.failure.reason, observed.failure.message
    troubled = [(PROBLEM_PRIORITY.index(p.problem.reason), p) for p in parts if p.problem]
    if not troubled:
        return None
    _, worst = min(troubled, key=lambda item: item[0])
    assert worst.problem is not None
    affected = f"{worst.problem_pods} pod(s) affected: " if worst.problem_pods else ""
    return worst.problem.reason, f"{worst.label}: {affected}{worst.problem.message}"


def _pool_status(
    cr: InferenceCluster, pool: PoolObservation, part: _Assessment, now: str
) -> WorkerPoolStatus:
    previous = list(pool.previous.conditions) if pool.previous else []
    ready = part.current and not part.short
    if ready:
        reason = reasons.POOL_READY
    elif part.problem:
        reason = part.problem.reason
    else:
        reason = part.progress_reason or reasons.PODS_NOT_READY
    message = f"{part.ready}/{part.desired} ready"
    if part.problem and not ready:
        message += f"{POOL_PROBLEM_SEPARATOR}{part.problem.message}"
    return WorkerPoolStatus(
        observed_generation=pool.pool_generation,
        replicas=part.replicas,
        ready_replicas=part.ready,
        updated_replicas=part.updated,
        desired_replicas=part.desired,
        selector=names.label_selector(pool_selector(cr, pool.role)),
        conditions=[
            _condition(
                reasons.READY,
                ready,
                reason,
                message,
                previous=previous,
                generation=pool.pool_generation,
                now=now,
            )
        ],
    )


def compute_status(cr: InferenceCluster, observed: Observed, now: str) -> StatusResult:
    """The InferenceCluster's and its WorkerPools' status, plus the Events to emit."""
    previous_status = cr.status or InferenceClusterStatus()
    previous = list(previous_status.conditions)
    generation = observed.generation

    pool_parts = {
        role: _remember_group_down(_assess(role.value, p.desired, p.workload, p.pods), p.previous)
        for role, p in observed.pools.items()
    }
    frontend = _assess(
        names.FRONTEND, observed.frontend_desired, observed.frontend, observed.frontend_pods
    )
    parts = [*pool_parts.values(), frontend]

    degraded = _degraded(observed, parts)
    decode = pool_parts.get(PoolRole.DECODE)
    cold_start = cold_start_timeout(cr.spec)
    at_zero = decode is not None and decode.desired == 0 and cold_start is not None
    if observed.failure is not None:
        ready, ready_reason, ready_message = (
            False,
            observed.failure.reason,
            observed.failure.message,
        )
    elif decode is None or (decode.desired == 0 and not at_zero):
        ready, ready_reason = False, reasons.NO_DECODE_WORKERS
        ready_message = "the decode pool has no workers; nothing can stream tokens"
    elif any(p.short for p in parts):
        ready = False
        ready_reason = degraded[0] if degraded else reasons.PODS_NOT_READY
        ready_message = _summary(parts)
    elif at_zero:
        ready, ready_reason = True, reasons.SCALED_TO_ZERO
        ready_message = (
            f"scaled to zero while idle ({_summary(parts)}): a request starts a decode "
            f"worker and waits up to {cold_start}s for it"
        )
    else:
        ready, ready_reason, ready_message = True, reasons.CLUSTER_READY, _summary(parts)

    # A spec that was not applied puts nothing in flight: only what exists can progress.
    moving = [p for p in parts if observed.failure is None or p.exists]
    progress = [(p.label, reason) for p in moving if (reason := p.progress_reason)]
    if progress:
        progress_reason = progress[0][1]
        progress_message = ", ".join(f"{label}: {reason}" for label, reason in progress)
    elif observed.failure is not None:
        progress_reason = observed.failure.reason
        progress_message = "nothing in flight: the latest spec was not applied (see Degraded)"
    else:
        progress_reason, progress_message = reasons.UP_TO_DATE, "up to date"
    conditions = [
        _condition(
            reasons.READY,
            ready,
            ready_reason,
            ready_message,
            previous=previous,
            generation=generation,
            now=now,
        ),
        _condition(
            reasons.PROGRESSING,
            bool(progress),
            progress_reason,
            progress_message,
            previous=previous,
            generation=generation,
            now=now,
        ),
        _condition(
            reasons.DEGRADED,
            degraded is not None,
            degraded[0] if degraded else reasons.AS_EXPECTED,
            degraded[1] if degraded else "",
            previous=previous,
            generation=generation,
            now=now,
        ),
    ]
    if observed.nvlink is not None:
        conditions.append(_nvlink_condition(observed.nvlink, previous, generation, now))
    if observed.plan is not None:
        slo, slo_reason, slo_message = compute_slo_condition(cr.spec, observed.plan)
        conditions.append(
            _condition(
                reasons.SLO_PREDICTED,
                slo,
                slo_reason,
                slo_message,
                previous=previous,
                generation=generation,
                now=now,
            )
        )

    def pool_status(role: PoolRole) -> PoolStatus:
        part = pool_parts.get(role)
        if part is None:
            return PoolStatus(desired=0, replicas=0, ready=0, updated=0)
        return PoolStatus(
            desired=part.desired, replicas=part.replicas, ready=part.ready, updated=part.updated
        )

    namespace = cr.metadata.namespace or "default"
    applied = observed.failure is None
    status = InferenceClusterStatus(
        observed_generation=generation if applied else previous_status.observed_generation,
        conditions=conditions,
        pools=InferenceClusterPools(
            prefill=pool_status(PoolRole.PREFILL), decode=pool_status(PoolRole.DECODE)
        ),
        endpoint=names.endpoint(cr.metadata.name, namespace, cr.spec.frontend.port),
        plan=observed.plan.effective if observed.plan is not None else None,
        workload=observed.plan.workload if observed.plan is not None else None,
    )
    pools = {
        role: _pool_status(cr, observed.pools[role], part, now) for role, part in pool_parts.items()
    }
    growing = degraded is None and all(
        p.label in _grown(previous_status, pool_parts) for p in parts if p.short
    )
    events = _events(previous_status, status, only_growing=growing)
    return StatusResult(cluster=status, pools=pools, events=events)


def _grown(before: InferenceClusterStatus, parts: Mapping[PoolRole, _Assessment]) -> set[str]:
    """Pools that want more replicas than before and lost none of their ready ones."""
    grown = set()
    for role, part in parts.items():
        old = getattr(before.pools, role.value)
        if part.desired > old.desired and part.ready >= old.ready:
            grown.add(part.label)
    return grown


def _nvlink_condition(
    placement: NvlinkPlacement, previous: list[Condition], generation: int, now: str
) -> Condition:
    if placement.scheduled == 0:
        status, reason, message = "Unknown", reasons.NO_WORKERS_SCHEDULED, "no worker scheduled"
    elif placement.split:
        status, reason = "False", reasons.SPLIT_ACROSS_NVLINK_DOMAINS
        message = (
            f"workers span NVLink domains ({placement.describe()}); KV between them moves "
            "over RDMA, not NVLink"
        )
    else:
        status, reason = "True", reasons.SAME_NVLINK_DOMAIN
        message = f"all {placement.scheduled} scheduled workers share one NVLink domain"
        message += f" ({placement.describe()})"
    before = next((c for c in previous if c.type == reasons.NVLINK_LOCAL), None)
    since = before.last_transition_time if before and before.status == status else now
    return Condition(
        type=reasons.NVLINK_LOCAL,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=since,
        observed_generation=generation,
    )


def _find(conditions: list[Condition], kind: str) -> Condition | None:
    return next((c for c in conditions if c.type == kind), None)


def _events(
    before: InferenceClusterStatus, after: InferenceClusterStatus, *, only_growing: bool
) -> tuple[EventRecord, ...]:
    """``only_growing``: every short component is a pool that grew (no Warning for that)."""
    events: list[EventRecord] = []
    old_ready = _find(list(before.conditions), reasons.READY)
    new_ready = _find(list(after.conditions), reasons.READY)
    was_ready = old_ready is not None and old_ready.status == "True"
    if new_ready is not None:
        if new_ready.status == "True" and not was_ready:
            events.append(EventRecord("Normal", reasons.EVENT_READY, new_ready.message))
        elif new_ready.status != "True" and was_ready and not only_growing:
            events.append(
                EventRecord(
                    "Warning",
                    reasons.EVENT_NOT_READY,
                    f"{new_ready.reason}: {new_ready.message}",
                )
            )
    old_degraded = _find(list(before.conditions), reasons.DEGRADED)
    new_degraded = _find(list(after.conditions), reasons.DEGRADED)
    was = old_degraded is not None and old_degraded.status == "True"
    if new_degraded is not None and new_degraded.status == "True":
        if not was or (old_degraded is not None and old_degraded.reason != new_degraded.reason):
            events.append(EventRecord("Warning", new_degraded.reason, new_degraded.message))
    elif was:
        events.append(EventRecord("Normal", reasons.EVENT_RECOVERED, "no longer degraded"))
    old_nvlink = _find(list(before.conditions), reasons.NVLINK_LOCAL)
    new_nvlink = _find(list(after.conditions), reasons.NVLINK_LOCAL)
    if (
        new_nvlink is not None
        and new_nvlink.reason == reasons.SPLIT_ACROSS_NVLINK_DOMAINS
        and (old_nvlink is None or old_nvlink.reason != new_nvlink.reason)
    ):
        events.append(EventRecord("Warning", new_nvlink.reason, new_nvlink.message))
    replan_event = compute_replan_event(before.workload, after.workload)
    if replan_event is not None:
        events.append(EventRecord(*replan_event))
    plan_event = compute_plan_event(before.plan, after.plan)
    if plan_event is not None:
        events.append(EventRecord(*plan_event))
    if before.conditions:  # a first status is not a resize
        for role in PoolRole:
            old = getattr(before.pools, role.value).desired
            new = getattr(after.pools, role.value).desired
            if old != new:
                events.append(
                    EventRecord(
                        "Normal", reasons.EVENT_POOL_RESIZED, f"{role.value}: {old} -> {new}"
                    )
                )
    return tuple(events)


def status_to_wire(status: Any) -> dict[str, Any]:
    """The fields this operator owns, camelCase: fields never set (queue depth, written by
    the autoscaler under its own field manager) are left out of the apply."""
    out: dict[str, Any] = status.model_dump(
        mode="json", by_alias=True, exclude_none=True, exclude_unset=True
    )
    return out
