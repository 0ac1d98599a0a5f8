"""Which workers a scale-down removes, and how Kubernetes is told the same preference.

Removing a worker is a drain, not a kill: the caller stops routing to the chosen
workers, lets their in-flight requests finish (bounded by the grace period) and only
then removes them. Choosing well keeps that drain short: a worker that is not ready
yet (cold start, or pending for a node) has nothing to finish, an idle one finishes at
once, a lightly loaded one soon.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# Kubernetes' controller.kubernetes.io/pod-deletion-cost: the ReplicaSet controller
# deletes lower-cost pods first. Not-ready pods already go first by its own rules.
POD_DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
_MAX_DELETION_COST = 2_147_483_647  # the annotation is an int32


@dataclass(frozen=True, slots=True)
class WorkerLoad:
    """One worker of a pool as the drain choice sees it; ``key`` is unique (pod name,
    process id or address). ``draining`` workers are already leaving and never chosen."""

    key: str
    ready: bool = True
    draining: bool = False
    active_sequences: int = 0
    queued_requests: int = 0
    queued_tokens: int = 0

    @property
    def in_flight(self) -> int:
        return self.active_sequences + self.queued_requests

    @property
    def idle(self) -> bool:
        return self.in_flight == 0 and self.queued_tokens == 0


def _removal_order(worker: WorkerLoad) -> tuple[int, int, int, int, str]:
    # Not ready first (nothing to finish), then idle, then least work in flight; the key
    # breaks ties so the same pool always yields the same choice.
    return (
        int(worker.ready),
        int(not worker.idle),
        worker.in_flight,
        worker.queued_tokens,
        worker.key,
    )


def choose_victims(workers: Iterable[WorkerLoad], count: int) -> list[str]:
    """Keys of up to ``count`` workers to drain, best candidates first.

    Never picks a draining worker, and never one with work in flight while an idle (or
    not-ready) one remains unpicked."""
    if count <= 0:
        return []
    candidates = sorted((w for w in workers if not w.draining), key=_removal_order)
    return [w.key for w in candidates[:count]]


def compute_pod_deletion_costs(workers: Sequence[WorkerLoad]) -> dict[str, int]:
    """``pod-deletion-cost`` per worker so that, when the operator lowers a pool's
    replicas, the ReplicaSet controller removes the workers :func:`choose_victims`
    would. Higher cost = kept longer; the cost grows with the work a pod holds."""
    costs: dict[str, int] = {}
    for worker in workers:
        if not worker.ready or worker.idle:
            costs[worker.key] = 0
            continue
        # Sequences dominate (a stream cut mid-answer is the worst outcome); tokens
        # waiting for prefill break ties between equally busy workers.
        weight = 1 + worker.in_flight * 1_000_000 + min(worker.queued_tokens, 999_999)
        costs[worker.key] = min(weight, _MAX_DELETION_COST)
    return costs
