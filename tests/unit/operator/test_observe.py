"""Raw Deployment and Pod JSON -> observations."""

from __future__ import annotations

import pytest

from tandem_operator import reasons
from tandem_operator.status.observe import classify_unschedulable, observe_pod, observe_workload


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (
            "0/9 nodes are available: 4 Insufficient nvidia.com/gpu, 5 node(s) didn't match "
            "Pod's node affinity/selector. preemption: 0/9 nodes are available",
            reasons.INSUFFICIENT_GPU,
        ),
        ("0/3 nodes are available: 3 Insufficient cpu.", reasons.INSUFFICIENT_CPU),
        ("0/3 nodes are available: 3 Insufficient memory.", reasons.INSUFFICIENT_MEMORY),
        (
            "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
            reasons.NO_MATCHING_NODES,
        ),
        (
            "0/2 nodes are available: 2 node(s) had untolerated taint {nvidia.com/gpu: }.",
            reasons.NO_MATCHING_NODES,
        ),
        ("0/1 nodes are available: 1 node(s) were unschedulable.", reasons.UNSCHEDULABLE),
    ],
)
def test_scheduler_messages_map_to_reasons(message: str, reason: str) -> None:
    assert classify_unschedulable(message) == reason


def pod(**status: object) -> dict[str, object]:
    return {"metadata": {"name": "p"}, "status": status}


def test_pending_pod_carries_the_scheduler_message() -> None:
    message = "0/9 nodes are available: 4 Insufficient nvidia.com/gpu."
    obs = observe_pod(
        pod(
            conditions=[
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                }
            ]
        )
    )
    assert not obs.ready
    assert obs.problem is not None
    assert (obs.problem.reason, obs.problem.message) == (reasons.INSUFFICIENT_GPU, message)


def test_ready_pod_has_no_problem() -> None:
    obs = observe_pod(
        pod(
            conditions=[
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True"},
            ]
        )
    )
    assert obs.ready and obs.problem is None


@pytest.mark.parametrize(
    ("waiting", "reason"),
    [("ImagePullBackOff", reasons.IMAGE_PULL_FAILED), ("CrashLoopBackOff", reasons.CRASH_LOOP)],
)
def test_waiting_containers_are_problems(waiting: str, reason: str) -> None:
    obs = observe_pod(pod(containerStatuses=[{"state": {"waiting": {"reason": waiting}}}]))
    assert obs.problem is not None and obs.problem.reason == reason


def test_container_creating_is_not_a_problem() -> None:
    obs = observe_pod(
        pod(containerStatuses=[{"state": {"waiting": {"reason": "ContainerCreating"}}}])
    )
    assert obs.problem is None


def test_terminating_pods_are_neither_ready_nor_a_problem() -> None:
    obj = pod(conditions=[{"type": "Ready", "status": "True"}])
    obj["metadata"] = {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"}
    obs = observe_pod(obj)
    assert not obs.ready and obs.problem is None


def test_workload_status_and_staleness() -> None:
    current = observe_workload(
        {
            "metadata": {"generation": 4},
            "status": {
                "observedGeneration": 4,
                "replicas": 3,
                "readyReplicas": 2,
                "updatedReplicas": 3,
            },
        }
    )
    assert (current.replicas, current.ready, current.updated, current.current) == (3, 2, 3, True)
    stale = observe_workload({"metadata": {"generation": 5}, "status": {"observedGeneration": 4}})
    assert not stale.current
    fresh = observe_workload({"metadata": {"generation": 1}})  # no status yet (e.g. LWS)
    assert fresh.current and fresh.replicas == 0
