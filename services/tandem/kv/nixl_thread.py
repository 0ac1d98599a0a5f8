"""The single thread that talks to a NIXL agent, and keeps UCX progressing.

A NIXL agent without a listener runs in ``NIXL_THREAD_SYNC_NONE`` mode: it must only be
called from one thread. NIXL's own progress thread (``enable_prog_thread``) busy-polls
with ``sched_yield`` and burns a whole core even when idle (measured: 3.0 s of CPU per
3 s idle), which a 2-core CPU host cannot afford. Instead this thread runs submitted
calls and, whenever it has been idle for ``idle_poll_s``, calls ``on_idle`` (the
transport passes ``get_new_notifs``, which progresses the UCX worker) so that the target
side of transports that need it (UCX ``tcp``) keeps answering reads.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(slots=True)
class _Job(Generic[T]):
    future: Future[T]
    fn: Callable[..., T]
    args: tuple[Any, ...]


class AgentThread:
    def __init__(
        self,
        name: str,
        on_idle: Callable[[], object],
        idle_poll_s: float,
        idle_errors: tuple[type[BaseException], ...],
    ) -> None:
        self._on_idle = on_idle
        self._idle_poll_s = idle_poll_s
        self._idle_errors = idle_errors
        self._jobs: queue.SimpleQueue[_Job[Any] | None] = queue.SimpleQueue()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        if self._stopped:
            raise RuntimeError("NIXL agent thread is stopped")
        future: Future[T] = Future()
        self._jobs.put(_Job(future, fn, args))
        return future

    def stop(self, timeout_s: float = 10.0) -> None:
        """Run the jobs already queued, then end the thread."""
        if not self._stopped:
            self._stopped = True
            self._jobs.put(None)
            self._thread.join(timeout_s)

    def _run(self) -> None:
        last_idle = time.monotonic()
        while True:
            try:
                job = self._jobs.get(timeout=self._idle_poll_s)
            except queue.Empty:
                job = None if self._stopped else _IDLE
            if job is None:
                return
            if job is not _IDLE:
                self._execute(job)
            if time.monotonic() - last_idle >= self._idle_poll_s:
                self._progress()
                last_idle = time.monotonic()

    def _execute(self, job: _Job[Any]) -> None:
        if not job.future.set_running_or_notify_cancel():
            return
        try:
            result = job.fn(*job.args)
        except BaseException as exc:  # delivered to the caller through the future
            job.future.set_exception(exc)
        else:
            job.future.set_result(result)

    def _progress(self) -> None:
        try:
            self._on_idle()
        except self._idle_errors as exc:
            logger.debug("NIXL progress call failed: %r", exc)


_IDLE: _Job[Any] = _Job(Future(), lambda: None, ())
