"""The router's subscriptions to every worker's KV events, feeding the ``KvIndex``.

One task per worker follows its ``KvEvents`` stream: the first batch is a snapshot, so a
new or reconnected subscription is exact. When a stream fails, what the index holds for
that worker may be stale, so it is removed at once and the task resubscribes after a
pause (``retry_s``, doubling up to ``max_retry_s``). Workers that leave the membership are
unsubscribed and removed. Every frontend replica runs its own feed against every worker,
so all replicas route on the same facts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from tandem.router.kv_index import KvIndex, StaleBatchError
from tandem.router.metrics import RouterMetrics
from tandem.router.ports import WorkerCallError, WorkerClient
from tandem.router.workers import WorkerState

logger = logging.getLogger(__name__)


class KvEventFeed:
    def __init__(
        self,
        index: KvIndex,
        metrics: RouterMetrics,
        *,
        retry_s: float = 0.5,
        max_retry_s: float = 10.0,
    ) -> None:
        self._index = index
        self._metrics = metrics
        self._retry_s = retry_s
        self._max_retry_s = max_retry_s
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def sync(self, workers: Iterable[WorkerState]) -> None:
        """Follow every current worker, drop the ones that left (call after each
        membership round)."""
        wanted = {state.key: state.client for state in workers if not state.removed}
        for key in [k for k in self._tasks if k not in wanted]:
            self._stop(key)
        for key, client in wanted.items():
            task = self._tasks.get(key)
            if task is not None and task.done() and not task.cancelled():
                # Only an unforeseen error ends a follower; start it again, loudly.
                logger.error("KV event follower of %s died: %r", key, task.exception())
                self._metrics.kv_event_stream_failures.inc()
                self._index.remove(key)
            if task is None or task.done():
                self._tasks[key] = asyncio.create_task(
                    self._follow(key, client), name=f"kv-events-{key}"
                )

    def following(self) -> list[str]:
        return sorted(k for k, t in self._tasks.items() if not t.done())

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for key in list(self._tasks):
            self._stop(key)
        await asyncio.gather(*tasks, return_exceptions=True)

    def _stop(self, key: str) -> None:
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()
        self._index.remove(key)

    async def _follow(self, key: str, client: WorkerClient) -> None:
        pause = self._retry_s
        while True:
            try:
                async for batch in client.kv_events():
                    applied = self._index.apply(key, batch)
                    applied_ok = applied.events - applied.skipped
                    self._metrics.kv_events.labels("applied").inc(applied_ok)
                    self._metrics.kv_events.labels("skipped").inc(applied.skipped)
                    if batch.snapshot:
                        self._metrics.kv_snapshots.inc()
                        pause = self._retry_s  # a good stream resets the back-off
                why = "stream ended"
            except (WorkerCallError, StaleBatchError) as exc:
                why = str(exc)
            # Whatever the index holds for this worker may now be out of date.
            self._index.remove(key)
            self._metrics.kv_event_stream_failures.inc()
            logger.info("KV events of %s interrupted (%s); resubscribing in %.1fs", key, why, pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, self._max_retry_s)
