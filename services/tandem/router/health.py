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
from tandem.router.ports import (
    HealthInfo,
    WorkerCallError,
    WorkerErrorKind,
    call_error,
    classify,
)
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
        forget: Callable[[str, str | None], None],
        tokenizer_fingerprint: str = "",
    ) -> None:
        self._table = table
        self._membership = membership
        self._metrics = metrics
        self._timeout = timeout_seconds
        # forget(key, new_incarnation): drop what the router knows of a worker's cache
        # (new_incarnation None: it left).
        self._forget = forget
        self._tokenizer = tokenizer_fingerprint
        self._refused: set[tuple[str, str]] = set()  # (worker, incarnation) already counted

    async def poll_once(self) -> None:
        members = await self._members()
        if members is None:
            return  # keep the table as it is; the next round asks again
        _, removed = self._table.reconcile(members)
        for state in removed:
            logger.info("worker %s left the membership", state.key)
            self._forget(state.key, None)
            self._refused = {seen for seen in self._refused if seen[0] != state.key}
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
            self._forget(state.key, health.incarnation)
        serving = health.status is HealthStatus.SERVING
        mismatch = self._tokenizer_mismatch(state, health)
        if mismatch:
            state.health, state.stats = health, stats
            state.healthy = False
            state.last_error = mismatch
            return
        if not state.healthy and serving:
            logger.info("worker %s (%s) is healthy", state.key, health.role)
        if state.healthy and not serving:
            logger.warning(
                "worker %s (%s) is not serving (%s): no new work goes to it",
                state.key,
                health.role,
                health.status,
            )
        state.health, state.stats = health, stats
        state.healthy = serving
        state.consecutive_failures = 0
        state.last_error = ""

    def _tokenizer_mismatch(self, state: WorkerState, health: HealthInfo) -> str:
        """Why ``state`` must get no work because its tokenizer is not ours ("" if it
        is): its ids would mean other text. Logged and counted once per incarnation."""
        if not self._tokenizer or health.tokenizer_fingerprint == self._tokenizer:
            return ""
        reported = health.tokenizer_fingerprint or "(none reported)"
        reason = (
            f"tokenizer mismatch: worker has {reported}, this frontend {self._tokenizer}; "
            "restart it with the cluster's model spec"
        )
        seen = (state.key, health.incarnation)
        if seen not in self._refused:
            self._refused.add(seen)
            logger.error("worker %s refused: %s", state.key, reason)
            self._metrics.tokenizer_mismatches.inc()
        return reason

    def mark_failed(self, state: WorkerState, exc: WorkerCallError) -> None:
        if state.healthy:
            logger.warning("worker %s marked unhealthy: %s", state.key, exc.message)
        state.healthy = False
        state.consecutive_failures += 1
        state.last_error = exc.message
