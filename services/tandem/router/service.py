"""The router's I/O shell: lifecycle, admission, views; requests go to ``dispatch``.

Decisions come from ``tandem.router.policy``; health from ``tandem.router.health``;
what each worker caches from its KV events (``kv_feed`` into ``kv_index``, Dynamo's
radix tree); each admitted request's calls, retries and fallbacks from
``tandem.router.dispatch``.
Admission is bounded: more than ``max_queued_requests`` waiting for their first token
(or ``max_active_requests`` in total) -> ``OverloadedError`` (429 + Retry-After); a
draining router refuses everything new (503) and readiness fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Mapping

from tandem.router.dispatch import Dispatcher
from tandem.router.errors import (
    NoWorkerAvailableError,
    OverloadedError,
)
from tandem.router.health import HealthMonitor
from tandem.router.kv_feed import KvEventFeed
from tandem.router.kv_index import KvIndex
from tandem.router.membership import MembershipSource
from tandem.router.messages import (
    GenerationChunk,
    GenerationRequest,
    RouterConfig,
    WorkerView,
)
from tandem.router.metrics import RouterMetrics
from tandem.router.ports import (
    WorkerCallError,
    WorkerClientFactory,
)
from tandem.router.workers import PoolLoad, WorkerState, WorkerTable, compute_pool_loads

logger = logging.getLogger(__name__)


class Router:
    def __init__(
        self,
        membership: MembershipSource,
        client_factory: WorkerClientFactory,
        metrics: RouterMetrics,
        config: RouterConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        index: KvIndex | None = None,
    ) -> None:
        """``index`` holds what each worker caches; a benchmark's baseline passes its
        own (``tandem_dev.bench.router_memory``)."""
        self._config = config or RouterConfig()
        self._membership = membership
        self._table = WorkerTable(client_factory)
        self._metrics = metrics
        self._clock = clock
        self.index = index if index is not None else KvIndex()
        self._feed = KvEventFeed(self.index, metrics)
        self._dispatcher = Dispatcher(
            self._config,
            self._table,
            metrics,
            mark_failed=self._mark_failed,
            spawn=self._spawn_if_running,
            clock=clock,
            index=self.index,
            await_round=self.next_round,
            next_round=self.wait_round,
        )
        self._health = HealthMonitor(
            self._table,
            membership,
            metrics,
            timeout_seconds=self.config.health_timeout_seconds,
            forget=self._dispatcher.forget_worker,
            tokenizer_fingerprint=self.config.tokenizer_fingerprint,
        )
        self._queued = 0  # admitted, first token not yet back
        self._active = 0  # admitted, not finished
        self._draining = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._background: set[asyncio.Task[None]] = set()
        self._started = False
        # Requests waiting for a worker outside the workers' queues (``count_queued``):
        # in front of the router, or in it for a decode worker to start.
        self._waiting_outside: list[Callable[[], Mapping[str, tuple[int, int]]]] = []
        # Health rounds: every interval, and at once when membership changes or a
        # request finds no usable worker (``next_round``).
        self._wake = asyncio.Event()
        self._rounds = 0
        self._round_done = asyncio.Condition()
        membership.on_change(self._wake.set)
        metrics.watch(self.pool_loads, lambda: self._active)
        self.count_queued(self._dispatcher.waiting_demand)

    @property
    def config(self) -> RouterConfig:
        return self._config

    @config.setter
    def config(self, config: RouterConfig) -> None:
        """Adopt new limits and policy (takes effect for the next request)."""
        self._config = config
        self._dispatcher.config = config

    # ------------------------------------------------------------------ lifecycle

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Router]:
        """Poll health and follow every worker's KV events in the background for the
        duration of the context.

        Background tasks (the poller, KV event subscriptions, early KV releases) are
        owned here and cancelled or awaited on exit; exceptions from the body pass
        through unwrapped."""
        self._started = True
        await self.poll_once()
        poller = self._spawn(self._poll_forever())
        try:
            yield self
        finally:
            self._started = False
            poller.cancel()
            await self._feed.close()
            await self._membership.close()
            # Releases are bounded by their own timeout; let them finish.
            pending = [t for t in self._background if t is not poller]
            await asyncio.gather(poller, *pending, return_exceptions=True)
            for state in self._table.pop_all():
                await state.client.close()

    def _spawn(self, coro: Coroutine[object, object, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _poll_forever(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.health_interval_seconds):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self.poll_once()
            except Exception:
                # A round handles its own known failures; this is the last line that
                # keeps membership and readiness from freezing on a bug we did not foresee.
                logger.exception("health round failed; polling again next interval")
                self._metrics.health_poll_errors.labels("round").inc()
            async with self._round_done:
                self._rounds += 1
                self._round_done.notify_all()

    def _settling(self) -> bool:
        """Whether the worker set is changing under us: a membership change not adopted
        yet, or a worker that joined and has not been health-checked."""
        return self._wake.is_set() or any(
            state.health is None and state.consecutive_failures == 0 and not state.removed
            for state in self._table.values()
        )

    async def next_round(self, timeout_s: float) -> bool:
        """While the worker set is settling, run a health round now and wait for it (at
        most ``timeout_s``); True when a request should look for a worker again. False at
        once when nothing is changing (or the router is not running): waiting would only
        delay the error."""
        if not self._started or timeout_s <= 0 or not self._settling():
            return False
        async with self._round_done:
            target = self._rounds + 2 if self._wake.is_set() else self._rounds + 1
            self._wake.set()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._round_done.wait_for(lambda: self._rounds >= target)
        return True

    async def wait_round(self, timeout_s: float) -> None:
        """Wait for the next health round, whatever it finds (at most ``timeout_s``)."""
        async with self._round_done:
            target = self._rounds + 1
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._round_done.wait_for(lambda: self._rounds >= target)

    async def poll_once(self) -> None:
        """One health round: adopt membership, then Health + Stats every worker; while
        running, subscribe to new workers' KV events and drop those that left."""
        await self._health.poll_once()
        if self._started:
            self._feed.sync(self._table.values())

    def _mark_failed(self, state: WorkerState, exc: WorkerCallError) -> None:
        self._health.mark_failed(state, exc)

    def _spawn_if_running(self, coro: Coroutine[object, object, None]) -> None:
        if self._started:
            self._spawn(coro)
        else:
            coro.close()  # outside ``running()`` nobody would await it

    # ------------------------------------------------------------------ views

    def ready(self) -> bool:
        """Whether to take requests: a decode worker can serve them, or (a pool that
        scales to zero) they may wait for one to start. A frontend that went unready at
        zero would leave the Service without endpoints: the first request would find
        no frontend instead of waiting for a worker."""
        if self._draining:
            return False
        if self.config.cold_start_wait_seconds > 0:
            return True
        return any(s.serves_decode and s.available for s in self._table.snapshots())

    @property
    def draining(self) -> bool:
        return self._draining

    def count_queued(self, source: Callable[[], Mapping[str, tuple[int, int]]]) -> None:
        """Count requests waiting in front of the router (the frontend's tenant queue)
        in the pool queue gauges the autoscaler reads: they are demand too. ``source``
        returns (requests, prompt tokens) by pool, and is called at each scrape."""
        self._waiting_outside.append(source)

    def pool_loads(self) -> dict[str, PoolLoad]:
        loads = compute_pool_loads(self._table.snapshots())
        for source in self._waiting_outside:
            for pool, (requests, tokens) in source().items():
                load = loads.get(pool, PoolLoad())
                loads[pool] = dataclasses.replace(
                    load,
                    queued_requests=load.queued_requests + requests,
                    queued_tokens=load.queued_tokens + tokens,
                )
        return loads

    def workers(self) -> list[WorkerView]:
        return [
            WorkerView(
                address=s.key,
                role=s.role.value,
                healthy=s.healthy and not s.removed,
                draining=s.draining,
                worker_id=s.health.worker_id if s.health else "",
                in_flight=s.in_flight,
                last_error=s.last_error,
                prefill_tokens_per_second=s.prefill_tokens_per_second,
            )
            for s in self._table.values()
        ]

    # ------------------------------------------------------------------ requests

    @property
    def in_flight(self) -> int:
        return self._active

    async def drain(self, grace_seconds: float = 0.0) -> int:
        """Refuse new requests from now on, then wait up to ``grace_seconds`` for the
        in-flight ones to finish; returns how many are still in flight."""
        if not self._draining:
            logger.info("draining: refusing new requests, %d in flight", self._active)
        self._draining = True
        if self._active and grace_seconds > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace_seconds):
                    await self._idle.wait()
        return self._active

    def _admit(self) -> None:
        cfg = self.config
        if self._draining:
            self._metrics.rejected.labels("draining").inc()
            raise NoWorkerAvailableError("this frontend is shutting down; retry on another")
        if self._queued >= cfg.max_queued_requests or self._active >= cfg.max_active_requests:
            self._metrics.rejected.labels("queue_full").inc()
            raise OverloadedError(
                f"the server is at capacity ({self._queued} requests queued); retry shortly",
                retry_after_seconds=cfg.retry_after_seconds,
            )

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[GenerationChunk, None]:
        """Tokens for one request; the first chunk carries its ``RouteInfo``.

        Raises ``TandemError``s before the first chunk (the frontend maps them to
        statuses) and ``GenerationFailedError`` if a worker fails mid-stream."""
        self._admit()
        self._queued += 1
        self._active += 1
        self._idle.clear()
        queued = True
        try:
            async with contextlib.aclosing(self._dispatcher.generate(request)) as chunks:
                async for chunk in chunks:
                    if queued:
                        queued = False
                        self._queued -= 1
                    yield chunk
        finally:
            if queued:
                self._queued -= 1
            self._active -= 1
            if not self._active:
                self._idle.set()
