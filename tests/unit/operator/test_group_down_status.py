"""A multi-node worker's group that lost a pod: status names the group and why, from the
exit until the LeaderWorkerSet has recreated it whole (pure)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tandem.api.v1alpha1 import PoolRole
from tandem_operator import reasons
from tandem_operator.status.compute import compute_status
from tandem_operator.status.observe import (
    PodObservation,
    WorkloadObservation,
    observe_pod,
)

from .test_status import NOW, make_cr, observed, pool

ENGINE_LOST = (
    "INFO tandem.worker: serving\n"
    "ERROR tandem.worker.scheduler: engine lost (2 decoding): tensor-parallel rank 1 at "
    "10.88.0.7:20008 closed the link mid-frame\n"
    "ERROR tandem.worker.main: the engine is lost: exiting for a restart\n"
)


def group_pod(
    name: str, worker: int, *, ready: bool, ended: dict[str, Any] | None = None, **meta: Any
) -> dict[str, Any]:
    """A pod of group 0 of LeaderWorkerSet ``c-prefill`` as the API returns it."""
    container: dict[str, Any] = {"name": "worker", "restartCount": 0, "state": {"running": {}}}
    if ended is not None:
        container |= {"restartCount": 1, "lastState": {"terminated": ended}}
    return {
        "metadata": {
            "name": name,
            "labels": {
                "leaderworkerset.sigs.k8s.io/name": "c-prefill",
                "leaderworkerset.sigs.k8s.io/group-index": "0",
                "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
            },
            **meta,
        },
        "spec": {"nodeName": "node-a"},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [container],
        },
    }


EXITED = {"exitCode": 1, "reason": "Error", "message": ENGINE_LOST}


def test_an_exited_group_pod_names_its_group_its_exit_and_its_last_words() -> None:
    leader = observe_pod(group_pod("c-prefill-0", 0, ready=False, ended=EXITED))
    assert leader.problem is not None and leader.problem.reason == reasons.GROUP_DOWN
    assert leader.problem.message == (
        "group c-prefill-0 is down: pod c-prefill-0 container worker exited 1 (Error): "
        "ERROR tandem.worker.main: the engine is lost: exiting for a restart; the "
        "LeaderWorkerSet recreates the whole group"
    )
    # Being deleted with the group (how LeaderWorkerSet restarts it), it still says so.
    killed = {"exitCode": 137, "reason": "Error"}
    follower = group_pod(
        "c-prefill-0-1", 1, ready=True, ended=killed, deletionTimestamp="2026-01-01T00:00:00Z"
    )
    problem = observe_pod(follower).problem
    assert problem is not None and problem.message.startswith(
        "group c-prefill-0 is down: pod c-prefill-0-1 container worker exited 137 (Error); "
    )


def test_a_pod_up_again_or_outside_a_group_is_no_group_down() -> None:
    assert observe_pod(group_pod("c-prefill-0", 0, ready=True, ended=EXITED)).problem is None
    lone = group_pod("c-decode-x", 0, ready=False, ended=EXITED)
    lone["metadata"]["labels"] = {}
    assert observe_pod(lone).problem is None
    assert observe_pod(group_pod("c-prefill-0", 0, ready=False)).problem is None  # starting


def test_status_names_the_down_group_until_it_is_whole_again() -> None:
    def status_with(pods: tuple[PodObservation, ...], ready: int, previous: Any = None) -> Any:
        prefill = pool(
            PoolRole.PREFILL,
            workload=WorkloadObservation(1, 1, 1, ready, 1),
            pods=pods,
            previous=previous,
        )
        cluster = observed(pools={**observed().pools, PoolRole.PREFILL: prefill})
        return compute_status(make_cr(), cluster, NOW)

    down = status_with(
        (
            observe_pod(group_pod("c-prefill-0", 0, ready=False, ended=EXITED)),
            observe_pod(group_pod("c-prefill-0-1", 1, ready=False)),
        ),
        ready=0,
    )
    conditions = {c.type: c for c in down.cluster.conditions}
    degraded = conditions[reasons.DEGRADED]
    assert (degraded.status, degraded.reason) == ("True", reasons.GROUP_DOWN)
    assert degraded.message.startswith("prefill: 1 pod(s) affected: group c-prefill-0 is down: ")
    pool_ready = down.pools[PoolRole.PREFILL].conditions[0]
    assert (pool_ready.status, pool_ready.reason) == ("False", reasons.GROUP_DOWN)
    assert [e.reason for e in down.events if e.type == "Warning"][-1] == reasons.GROUP_DOWN

    # Recreated: new pods starting, the exited one gone. Status keeps why.
    starting = (PodObservation("c-prefill-0"), PodObservation("c-prefill-0-1"))
    previous = down.pools[PoolRole.PREFILL]
    recreating = status_with(starting, ready=0, previous=previous)
    again = {c.type: c for c in recreating.cluster.conditions}[reasons.DEGRADED]
    assert again.reason == reasons.GROUP_DOWN
    assert again.message == "prefill: " + degraded.message.removeprefix(
        "prefill: 1 pod(s) affected: "
    )
    assert recreating.pools[PoolRole.PREFILL].conditions[0].message == pool_ready.message

    # Whole again: ready, and no longer degraded.
    up = replace(starting[0], ready=True), replace(starting[1], ready=True)
    whole = status_with(up, ready=1, previous=recreating.pools[PoolRole.PREFILL])
    final = {c.type: c for c in whole.cluster.conditions}
    assert final[reasons.READY].status == "True"
    assert final[reasons.DEGRADED].status == "False"
    assert whole.pools[PoolRole.PREFILL].conditions[0].reason == reasons.POOL_READY
