"""Raw API objects -> the few facts status needs (pure).

Keeping this apart from ``status`` lets the status logic be table-tested with small typed
values instead of full Deployment/Pod JSON.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pydantic

from tandem.api.v1alpha1 import (
    InferenceCluster,
    PlanStatus,
    PoolRole,
    WorkerPoolStatus,
    WorkloadStatus,
)
from tandem_operator import reasons
from tandem_operator.render.children import LWS_GROUP_INDEX_LABEL, LWS_NAME_LABEL
from tandem_operator.render.placement import NvlinkPlacement
from tandem_operator.render.profiling import ProfileFailed, Profiling

Manifest = dict[str, Any]


@dataclass(frozen=True, slots=True)
class WorkloadObservation:
    """A Deployment's or LeaderWorkerSet's status (LWS counts groups, not pods)."""

    generation: int = 0
    observed_generation: int | None = None  # None: the kind does not report it
    replicas: int = 0
    ready: int = 0
    updated: int = 0

    @property
    def current(self) -> bool:
        """Has the workload's controller seen its latest spec?"""
        return self.observed_generation is None or self.observed_generation >= self.generation


@dataclass(frozen=True, slots=True)
class PodProblem:
    reason: str  # one of the Degraded reasons in ``reasons``
    message: str


@dataclass(frozen=True, slots=True)
class PodObservation:
    name: str
    ready: bool = False
    problem: PodProblem | None = None
    node_name: str = ""  # "" until scheduled (and for terminating pods)


_EXIT_MESSAGE_CHARS = 240


@dataclass(frozen=True, slots=True)
class PoolObservation:
    role: PoolRole
    desired: int  # the WorkerPool's spec.replicas: what the pool should have
    pool_generation: int = 0
    workload: WorkloadObservation | None = None
    pods: tuple[PodObservation, ...] = ()
    previous: WorkerPoolStatus | None = None


@dataclass(frozen=True, slots=True)
class Failure:
    """Why the last reconcile could not apply the desired state."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class PlanObservation:
    """The plan for the spec as it is (None while it is being made), and the one in
    status from before."""

    current: PlanStatus | None
    previous: PlanStatus | None
    # Planned against observed workload, when the operator watches the frontends.
    workload: WorkloadStatus | None = None
    # No table to plan from yet (the reference engine on cpu): profiling, or why not.
    profile: Profiling | ProfileFailed | None = None

    @property
    def effective(self) -> PlanStatus | None:
        """What status shows and auto renders: a plan being remade keeps the last one
        (rolling to the hand-written shape and back would cost two rollouts)."""
        return self.current or self.previous


@dataclass(frozen=True, slots=True)
class Observed:
    generation: int
    pools: Mapping[PoolRole, PoolObservation] = field(default_factory=dict)
    frontend: WorkloadObservation | None = None
    frontend_desired: int = 1
    frontend_pods: tuple[PodObservation, ...] = ()
    failure: Failure | None = None
    # NVLink domains of the scheduled workers (profiles with NVLink domains only).
    nvlink: NvlinkPlacement | None = None
    # Planning modes check and auto only.
    plan: PlanObservation | None = None


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


def observe_workload(obj: Manifest) -> WorkloadObservation:
    status = obj.get("status") or {}
    observed = status.get("observedGeneration")
    return WorkloadObservation(
        generation=_int(obj.get("metadata", {}).get("generation")),
        observed_generation=observed if isinstance(observed, int) else None,
        replicas=_int(status.get("replicas")),
        ready=_int(status.get("readyReplicas")),
        updated=_int(status.get("updatedReplicas")),
    )


# Scheduler messages ("0/9 nodes are available: 4 Insufficient nvidia.com/gpu, 5 node(s)
# had untolerated taint ...") -> the most specific reason, most actionable first.
_SCHEDULER_PATTERNS: tuple[tuple[str, str], ...] = (
    ("Insufficient nvidia.com/gpu", reasons.INSUFFICIENT_GPU),
    ("Insufficient cpu", reasons.INSUFFICIENT_CPU),
    ("Insufficient memory", reasons.INSUFFICIENT_MEMORY),
    ("Insufficient rdma/", reasons.INSUFFICIENT_RDMA),
    ("didn't match Pod's node affinity/selector", reasons.NO_MATCHING_NODES),
    ("untolerated taint", reasons.NO_MATCHING_NODES),
)

_WAITING_REASONS: Mapping[str, str] = {
    "ImagePullBackOff": reasons.IMAGE_PULL_FAILED,
    "ErrImagePull": reasons.IMAGE_PULL_FAILED,
    "InvalidImageName": reasons.IMAGE_PULL_FAILED,
    "CrashLoopBackOff": reasons.CRASH_LOOP,
}


# The scheduler's words for a pod whose PVC does not exist (k8s 1.36 prints the claim's
# "not found" twice: `... persistentvolumeclaim "models" not found. not found`).
_MISSING_CLAIM = re.compile(r'persistentvolumeclaim "([^"]+)" not found')


def describe_missing_claim(message: str, namespace: str) -> PodProblem | None:
    """A pod refused because its PVC does not exist: which claim, and what to do."""
    found = _MISSING_CLAIM.search(message)
    if found is None:
        return None
    claim = found[1]
    return PodProblem(
        reasons.VOLUME_MISSING,
        f"persistentvolumeclaim {claim!r} does not exist in namespace {namespace}: create it "
        f"and put the model there (spec.model.source pvc://{claim}/...; e.g. "
        "manifests/storage/models-pvc.yaml, docs/gpu-deployment.md §2)",
    )


def classify_unschedulable(message: str) -> str:
    for needle, reason in _SCHEDULER_PATTERNS:
        if needle in message:
            return reason
    return reasons.UNSCHEDULABLE


def _conditions(obj: Manifest) -> Iterable[Manifest]:
    return (obj.get("status") or {}).get("conditions") or ()


def observe_pod(obj: Manifest) -> PodObservation:
    name = obj.get("metadata", {}).get("name", "")
    ready = False
    problem: PodProblem | None = None
    for cond in _conditions(obj):
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
        elif (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            message = cond.get("message") or "pod cannot be scheduled"
            namespace = obj.get("metadata", {}).get("namespace", "")
            problem = describe_missing_claim(message, namespace) or PodProblem(
                classify_unschedulable(message), message
            )
    if problem is None:
        for container in (obj.get("status") or {}).get("containerStatuses") or ():
            waiting = (container.get("state") or {}).get("waiting") or {}
            reason = _WAITING_REASONS.get(waiting.get("reason", ""))
            if reason:
                problem = PodProblem(reason, waiting.get("message") or waiting["reason"])
                break
    node = (obj.get("spec") or {}).get("nodeName") or ""
    if obj.get("metadata", {}).get("deletionTimestamp"):
        ready = False  # terminating pods are leaving the pool
        problem = None
        node = ""
    # Checked last: a group recreated after an exit is first deleted whole, and its
    # terminating pods are where the exit shows. A pod ready again is up, whatever it
    # went through.
    if not ready:
        problem = describe_group_exit(obj) or problem
    return PodObservation(name=name, ready=ready, problem=problem, node_name=node)


def describe_group_exit(obj: Manifest) -> PodProblem | None:
    """A group pod whose container exited (ended, or restarted after ending): the whole
    group is down until its LeaderWorkerSet has recreated it. Which group, which pod and
    container, its exit code and the last line it wrote (a worker's termination message
    is its log's tail)."""
    labels = obj.get("metadata", {}).get("labels") or {}
    lws, index = labels.get(LWS_NAME_LABEL), labels.get(LWS_GROUP_INDEX_LABEL)
    if lws is None or index is None:
        return None
    for container in (obj.get("status") or {}).get("containerStatuses") or ():
        state, last = container.get("state") or {}, container.get("lastState") or {}
        ended = state.get("terminated") or last.get("terminated")
        if not ended:
            continue
        lines = [line for line in (ended.get("message") or "").splitlines() if line.strip()]
        said = f": {lines[-1].strip()[:_EXIT_MESSAGE_CHARS]}" if lines else ""
        why = ended.get("reason") or "Error"
        return PodProblem(
            reasons.GROUP_DOWN,
            f"group {lws}-{index} is down: pod {obj['metadata'].get('name', '')} container "
            f"{container.get('name', '')} exited {ended.get('exitCode', '?')} ({why}){said}; "
            "the LeaderWorkerSet recreates the whole group",
        )
    return None


class InvalidObject(Exception):
    """The stored object does not parse as our API (e.g. written around the schema)."""


def parse_cluster(obj: Mapping[str, Any]) -> InferenceCluster:
    doc = {k: obj[k] for k in ("apiVersion", "kind", "metadata", "spec", "status") if k in obj}
    try:
        return InferenceCluster.model_validate(doc)
    except pydantic.ValidationError as exc:
        raise InvalidObject(str(exc)) from None
