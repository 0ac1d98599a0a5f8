"""The worker's KV event fan-out: engine events in, one stream per subscriber out.

Every router replica subscribes to every worker (``KvEvents`` RPC). A subscriber first
gets a snapshot — every reusable block the engine holds now, from the mirror
``KvCacheState`` kept here — and then each batch of changes, in order. Subscribers have
bounded queues: one that falls behind is cut off (``WorkerBusy``) rather than slowing
the engine or silently missing an event; it resubscribes and starts from a fresh
snapshot. Engine events arrive on the engine thread and are handed to the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field

from tandem.kv.events import AllCleared, KvCacheEvent, KvCacheState
from tandem.worker.errors import WorkerBusy
from tandem.worker.types import KvEventBatch

logger = logging.getLogger(__name__)

MAX_QUEUED_BATCHES = 4096


@dataclass(slots=True, eq=False)  # compared by identity: kept in a set
class _Subscriber:
    # None: the log closed, the stream ends.
    queue: asyncio.Queue[tuple[KvCacheEvent, ...] | None] = field(
        default_factory=lambda: asyncio.Queue(MAX_QUEUED_BATCHES)
    )
    overflowed: bool = False


class KvEventLog:
    def __init__(self, worker_id: str, incarnation: str, block_size: int) -> None:
        self._worker_id = worker_id
        self._incarnation = incarnation
        self._block_size = block_size
        self._state = KvCacheState()
        self._subscribers: set[_Subscriber] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop ``publish_threadsafe`` hands events to (the worker's)."""
        self._loop = loop

    def publish_threadsafe(self, events: Sequence[KvCacheEvent]) -> None:
        """``publish`` from the engine thread."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.publish, tuple(events))

    def publish(self, events: Sequence[KvCacheEvent]) -> None:
        batch = tuple(events)
        if not batch:
            return
        for event in batch:
            self._state.apply(event)
        for subscriber in list(self._subscribers):
            try:
                subscriber.queue.put_nowait(batch)
            except asyncio.QueueFull:
                subscriber.overflowed = True
                self._subscribers.discard(subscriber)

    def close(self) -> None:
        """End every subscriber's stream (the worker is stopping); no new ones."""
        self._closed = True
        for subscriber in list(self._subscribers):
            try:
                subscriber.queue.put_nowait(None)
            except asyncio.QueueFull:
                subscriber.overflowed = True
        self._subscribers.clear()

    @property
    def blocks(self) -> int:
        return len(self._state)

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    async def subscribe(self) -> AsyncGenerator[KvEventBatch, None]:
        """The snapshot, then every batch of changes, until the caller stops."""
        if self._closed:
            return
        subscriber = _Subscriber()
        self._subscribers.add(subscriber)
        try:
            snapshot: tuple[KvCacheEvent, ...] = (AllCleared(), *self._state.snapshot())
            yield self._batch(snapshot, snapshot=True, sequence=0)
            sequence = 0
            while True:
                if subscriber.overflowed:
                    raise WorkerBusy(
                        f"KV event subscriber of {self._worker_id} fell more than "
                        f"{MAX_QUEUED_BATCHES} batches behind; resubscribe for a snapshot"
                    )
                events = await subscriber.queue.get()
                if events is None:
                    return
                sequence += 1
                yield self._batch(events, snapshot=False, sequence=sequence)
        finally:
            self._subscribers.discard(subscriber)

    def _batch(
        self, events: tuple[KvCacheEvent, ...], *, snapshot: bool, sequence: int
    ) -> KvEventBatch:
        return KvEventBatch(
            worker_id=self._worker_id,
            incarnation=self._incarnation,
            block_size=self._block_size,
            snapshot=snapshot,
            sequence=sequence,
            events=events,
        )
