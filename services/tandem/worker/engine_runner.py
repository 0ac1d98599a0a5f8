"""The one thread an engine runs on: every engine call is serialised through it.

After every call the runner takes a fresh ``EngineStats`` snapshot and, for an engine
that reports KV cache events (``kv.events.KvEventSource``), drains them to
``kv_event_sink`` (called on the engine thread)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from tandem.engines.base import Engine, EngineError, EngineStats
from tandem.kv.events import KvCacheEvent

logger = logging.getLogger(__name__)

T = TypeVar("T")


class EngineRunner:
    """Runs engine calls in FIFO order on a dedicated thread and keeps a fresh
    ``EngineStats`` snapshot (taken after every call) for cheap Stats RPCs."""

    def __init__(self, executor: ThreadPoolExecutor, engine: Engine) -> None:
        self._executor = executor
        self.engine = engine
        self.stats: EngineStats = engine.stats()
        self.kv_event_sink: Callable[[Sequence[KvCacheEvent]], None] | None = None

    @classmethod
    async def start(cls, build: Callable[[], Engine]) -> EngineRunner:
        """Build the engine on its own thread (weights, BLAS settings) and wrap it."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")
        engine = await asyncio.wrap_future(executor.submit(build))
        return cls(executor, engine)

    async def call(
        self,
        fn: Callable[..., T],
        *args: Any,
        on_abandon: Callable[[T], object] | None = None,
    ) -> T:
        """Run ``fn(*args)`` on the engine thread and wait for it.

        If the caller is cancelled while the call is already running, the call still
        completes; ``on_abandon(result)`` then runs on the engine thread, so that e.g. a
        prefill nobody waits for any more releases its KV.
        """
        future = self._executor.submit(self._run, fn, args)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if on_abandon is not None:
                future.add_done_callback(lambda done: _abandon(done, on_abandon))
            raise

    def call_soon(self, fn: Callable[..., object], *args: Any) -> None:
        """Queue ``fn(*args)`` without waiting (cleanup such as ``release``)."""
        future = self._executor.submit(self._run, fn, args)
        future.add_done_callback(_log_failure)

    def _run(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        try:
            return fn(*args)
        finally:
            self.stats = self.engine.stats()
            self._drain_kv_events()

    def _drain_kv_events(self) -> None:
        drain: Callable[[], list[KvCacheEvent]] | None = getattr(
            self.engine, "drain_kv_events", None
        )
        if drain is None or self.kv_event_sink is None:
            return
        events = drain()
        if events:
            self.kv_event_sink(events)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)


def _abandon(done: Future[T], on_abandon: Callable[[T], object]) -> None:
    if done.cancelled() or done.exception() is not None:
        return
    try:
        on_abandon(done.result())
    except EngineError as exc:
        logger.warning("cleanup of an abandoned engine call failed: %s", exc)


def _log_failure(done: Future[Any]) -> None:
    if not done.cancelled() and done.exception() is not None:
        logger.warning("background engine call failed: %r", done.exception())
