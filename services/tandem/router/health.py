"""Health tracking: each round adopts the membership, then asks every worker for Health
and Stats (each call bounded by a deadline). A failed call marks the worker unhealthy at
once; the next successful round brings it back. A changed incarnation means the worker
restarted and lost whatever it had cached, so the router forgets its prefixes.

A round never raises: membership and readiness must not freeze because one worker sent
something unexpected (a role string from a newer version) or the membership backend
failed once. Such failures are logged, counted in
``tandem_router_health_poll_errors_total{stage}`` and the round goes on; a membership
failure keeps the previous members, a worker failure marks that worker unhealthy."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from tandem.router.membership import Member, MembershipSource
from tandem.router.metrics import RouterMetrics
from tandem.router.ports import WorkerCallError, WorkerErrorKind, call_error, classify
from tandem.router.workers import WorkerState, WorkerTable
from tandem.worker.types import HealthStatus

logger = logging.getLogger(__name__)


class HealthMonitor:
    def __init__(
        self,
        table: WorkerTable,
        membership: MembershipSource,
        metrics: RouterMetrics,
        *,
        timeout_seconds: float,
        forget: Callable[[str], None],
    ) -> None:
        self._table = table
        self._membership = membership
        self._metrics = metrics
        self._timeout = timeout_seconds
        self._forget = forget  # drop what the router remembers about a worker's cache

    async def poll_once(self) -> None:
        members = await self._members()
        if members is None:
            return  # keep the table as it is; the next round asks again
        _, removed = self._table.reconcile(members)
        for state in removed:
            logger.info("worker %s left the membership", state.key)
            self._forget(state.key)
        for state in self._table.collect_removed():
            await state.client.close()
        async with asyncio.TaskGroup() as tasks:
            for state in list(self._table.values()):
                if not state.removed:
                    tasks.create_task(self._poll_worker(state))

    async def _members(self) -> Sequence[Member] | None:
        try:
            return await self._membership.members()
        except Exception:
            # Any backend (DNS, file, EndpointSlice watch) may fail in ways of its own;
            # one bad answer must not stop health polling for good.
            logger.exception("membership lookup failed; keeping the previous members")
            self._metrics.health_poll_errors.labels("membership").inc()
            return None

    async def _poll_worker(self, state: WorkerState) -> None:
        try:
            health = await state.client.health(timeout_s=self._timeout)
            stats = await state.client.stats(timeout_s=self._timeout)
        except WorkerCallError as exc:
            self._metrics.worker_errors.labels("health", classify(exc).value).inc()
            self.mark_failed(state, exc)
            return
        except Exception as exc:
            # Not a failed call but a reply (or client) we did not expect: the worker is
            # unusable until it answers sanely; the other workers are polled as usual.
            logger.exception("health poll of worker %s failed unexpectedly", state.key)
            self._metrics.health_poll_errors.labels("worker").inc()
            detail = f"unexpected health reply: {exc!r}"
            self.mark_failed(state, call_error(state.key, WorkerErrorKind.INTERNAL, detail))
            return
        if state.health is not None and state.health.incarnation != health.incarnation:
            logger.info("worker %s restarted (incarnation %s)", state.key, health.incarnation)
            self._forget(state.key)
        serving = health.status is HealthStatus.SERVING
        if not state.healthy and serving:
            logger.info("worker %s (%s) is healthy", state.key, health.role)
        state.health, state.stats = health, stats
        state.healthy = serving
        state.consecutive_failures = 0
        state.last_error = ""

    def mark_failed(self, state: WorkerState, exc: WorkerCallError) -> None:
        if state.healthy:
            logger.warning("worker %s marked unhealthy: %s", state.key, exc.message)
        state.healthy = False
        state.consecutive_failures += 1
        state.last_error = exc.message
