"""A work queue with controller-runtime semantics, on asyncio.

- A key is queued at most once, however often it is added (events coalesce).
- A key is never processed by two workers at once: added while in flight, it is marked
  dirty and queued again when the worker calls :meth:`done`.
- :meth:`add_after` schedules an add (requeue after a delay); :meth:`add_rate_limited`
  backs off exponentially per key until :meth:`forget` resets it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable
from typing import Generic, TypeVar

from tandem_operator import metrics

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(self, *, base_delay: float = 0.25, max_delay: float = 60.0) -> None:
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._added_at: dict[K, float] = {}
        self._failures: dict[K, int] = {}
        self._timers: dict[K, asyncio.TimerHandle] = {}
        self._base_delay = base_delay
        self._max_delay = max_delay

    def __len__(self) -> int:
        return self._queue.qsize()

    def add(self, key: K) -> None:
        metrics.QUEUE_ADDS.inc()
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._added_at[key] = time.monotonic()
        self._queue.put_nowait(key)
        metrics.QUEUE_DEPTH.set(self._queue.qsize())

    def add_after(self, key: K, delay: float) -> None:
        """Add ``key`` after ``delay`` seconds; an earlier pending timer for it wins."""
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        pending = self._timers.get(key)
        due = loop.time() + delay
        if pending is not None and pending.when() <= due:
            return
        if pending is not None:
            pending.cancel()
        self._timers[key] = loop.call_at(due, self._fire, key)

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def add_rate_limited(self, key: K) -> float:
        """Requeue after an exponential per-key backoff; returns the delay chosen."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = min(self._base_delay * 2.0**failures, self._max_delay)
        metrics.QUEUE_RETRIES.inc()
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)

    async def get(self) -> K:
        """The next key; the caller must call :meth:`done` with it when finished."""
        key = await self._queue.get()
        self._queued.discard(key)
        self._processing.add(key)
        added = self._added_at.pop(key, None)
        if added is not None:
            metrics.QUEUE_WAIT.observe(time.monotonic() - added)
        metrics.QUEUE_DEPTH.set(self._queue.qsize())
        return key

    def done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def close(self) -> None:
        """Cancel pending delayed adds (workers themselves are cancelled by their owner)."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
