"""Plans for the reconcilers: cached by spec hash, made by a few background workers.

``lookup`` never waits. It answers from the cache (or from the cluster's status, when the
plan there is for the same hash: a restarted operator does not plan again), or queues the
spec and answers None; once the plan is made, every cluster that asked for it is
enqueued, and its next reconcile finds it. Specs with the same hash share one plan.

A spec the planner refuses stays refused until it changes. A plan that did not come back
(the child timed out or crashed: a busy node, a transient limit) is tried again after
``retry_s``, and no sooner: the clusters that asked are enqueued then.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from tandem.api.v1alpha1 import InferenceClusterSpec, PlanOutcome, PlanStatus
from tandem.sim.spec_plan import compute_spec_hash, describe_failure
from tandem_operator.kube.informer import Key
from tandem_operator.planning.runner import PlanFunction, PlanningFailed

logger = logging.getLogger(__name__)

# Plans made at once: each is a process busy on one core for seconds.
DEFAULT_WORKERS = 2
# Plans remembered; a plan is a few hundred bytes, a hash per distinct planned spec.
DEFAULT_CAPACITY = 512
# How long a plan that did not come back is remembered before it is tried again.
DEFAULT_RETRY_SECONDS = 300.0


class PlanService:
    def __init__(
        self,
        plan: PlanFunction,
        enqueue: Callable[[Key], None],
        *,
        workers: int = DEFAULT_WORKERS,
        capacity: int = DEFAULT_CAPACITY,
        retry_s: float = DEFAULT_RETRY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._plan = plan
        self._enqueue = enqueue
        self._workers = workers
        self._capacity = capacity
        self._retry_s = retry_s
        self._clock = clock
        self._plans: OrderedDict[str, PlanStatus] = OrderedDict()
        # Hashes whose plan did not come back -> when they may be tried again.
        self._retry_at: dict[str, float] = {}
        # Hashes queued or being planned -> the clusters to enqueue when done.
        self._waiting: dict[str, set[Key]] = {}
        self._requests: asyncio.Queue[tuple[str, InferenceClusterSpec, str | None]] = (
            asyncio.Queue()
        )

    def lookup(
        self,
        key: Key,
        spec: InferenceClusterSpec,
        previous: PlanStatus | None,
        perf_table: str | None = None,
    ) -> PlanStatus | None:
        """The plan for ``spec`` (planning mode check or auto) from the step-time table
        ``perf_table`` (its text), if any; None while it is made."""
        spec_hash = compute_spec_hash(spec, perf_table)
        retry_at = self._retry_at.get(spec_hash)
        if retry_at is not None and self._clock() >= retry_at:
            del self._retry_at[spec_hash]
            self._plans.pop(spec_hash, None)
        plan = self._plans.get(spec_hash)
        if plan is None:
            plan = _reusable(previous, spec_hash)
            if plan is not None:
                self._remember(spec_hash, plan)
        if plan is not None:
            self._plans.move_to_end(spec_hash)
            return plan
        if spec_hash not in self._waiting:
            self._waiting[spec_hash] = set()
            self._requests.put_nowait((spec_hash, spec, perf_table))
            logger.info("[%s/%s] planning spec %s", key[0], key[1], spec_hash)
        self._waiting[spec_hash].add(key)
        return None

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tasks:
            for _ in range(self._workers):
                tasks.create_task(self._work())

    async def _work(self) -> None:
        while True:
            spec_hash, spec, perf_table = await self._requests.get()
            try:
                plan = await self._plan(spec, perf_table)
            except PlanningFailed as exc:
                message = f"{exc}; planning again in {self._retry_s:g} s"
                plan = describe_failure(spec_hash, spec.planning.mode, message)
                self._retry_at[spec_hash] = self._clock() + self._retry_s
            # A refused spec is remembered too: it is not planned again until it changes
            # (or the operator restarts), so a hopeless spec costs one try.
            self._remember(spec_hash, plan)
            keys = self._waiting.pop(spec_hash, set())
            for key in keys:
                logger.info("[%s/%s] plan %s: %s", key[0], key[1], spec_hash, plan.message)
                self._enqueue(key)
            if spec_hash in self._retry_at:
                loop = asyncio.get_running_loop()
                for key in keys:
                    loop.call_later(self._retry_s, self._enqueue, key)

    def _remember(self, spec_hash: str, plan: PlanStatus) -> None:
        self._plans[spec_hash] = plan
        while len(self._plans) > self._capacity:
            self._plans.popitem(last=False)


def _reusable(previous: PlanStatus | None, spec_hash: str) -> PlanStatus | None:
    """The plan in status when it is for this very hash; a failure is worth another try."""
    if previous is None or previous.spec_hash != spec_hash:
        return None
    return None if previous.outcome is PlanOutcome.FAILED else previous
