"""Waiting for a decode worker to start: the decision (pure) and the error past its bound.

With ``decode.minReplicas: 0`` an idle cluster has no decode worker. A request that
finds none is neither refused nor routed: it waits, counted as decode demand (the
autoscaler reads it from ``tandem_router_queue_depth_requests{pool="decode"}`` and
starts a worker), and is served once a worker is ready. The wait is bounded
(``frontend.coldStartTimeoutSeconds``); past it the client gets 503 with Retry-After,
never an open-ended hang.
"""

from __future__ import annotations

import enum

from tandem.router.errors import NoWorkerAvailableError


class WorkerWait(enum.StrEnum):
    """What a request without a decode worker does next (also the wait histogram's
    ``outcome`` label)."""

    SERVED = "served"  # a worker is there: route it
    WAITING = "waiting"  # none yet, time left: wait for the next health round
    TIMED_OUT = "timed_out"  # none within the bound: give up with 503


def decide_worker_wait(*, found: bool, waited_seconds: float, limit_seconds: float) -> WorkerWait:
    """``found``: a decode worker could take the request now; ``limit_seconds`` 0: the
    cluster never waits for a cold start (its decode pool keeps a worker)."""
    if found:
        return WorkerWait.SERVED
    if waited_seconds < limit_seconds:
        return WorkerWait.WAITING
    return WorkerWait.TIMED_OUT


class NoWorkerStartedError(NoWorkerAvailableError):
    """No decode worker became ready within the cold-start bound (503 + Retry-After)."""

    code = "no_worker_started"

    def __init__(self, limit_seconds: float, *, retry_after_seconds: int) -> None:
        super().__init__(
            f"no decode worker started within {limit_seconds:g} s "
            "(the pool is scaled to zero or its workers are starting); retry later"
        )
        self.retry_after_seconds = retry_after_seconds
