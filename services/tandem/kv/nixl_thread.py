"""The single thread that talks to a NIXL agent, and progresses UCX only when needed.

A NIXL agent without a listener runs in ``NIXL_THREAD_SYNC_NONE`` mode: it must only be
called from one thread. NIXL's own progress thread (``enable_prog_thread``) busy-polls
with ``sched_yield`` and burns a whole core even when idle (measured: 3.0 s of CPU per
3 s idle), which a 2-core CPU host cannot afford. NIXL 1.5.1 offers no blocking wait (no
file descriptor to sleep on, no completion callback in its Python API), so this thread
is the progress engine, and it only spins when something is in flight:

- idle (nothing watched, no reads expected), it blocks on its job queue: no wake-ups;
- while a transfer this agent initiated is watched (``watch``), it checks it every
  ``busy_poll_s`` (``check_xfer_state`` progresses the UCX worker) and resolves the
  watch's future the moment it leaves "PROC": the asyncio side awaits that future, it
  never sleeps and re-polls;
- while the worker expects peers to read from it (``set_serving``: claimed KV), it calls
  ``progress`` every ``serve_poll_s`` so that the target side of transports that need it
  (UCX ``tcp``) keeps answering reads.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")

BUSY_POLL_S = 0.0001


@dataclass(slots=True)
class _Job(Generic[T]):
    future: Future[T]
    fn: Callable[..., T]
    args: tuple[Any, ...]


@dataclass(slots=True)
class _Watch:
    key: object
    check: Callable[[], str]
    future: Future[str]


class AgentThread:
    def __init__(
        self,
        name: str,
        progress: Callable[[], object],
        serve_poll_s: float,
        errors: tuple[type[BaseException], ...],
        *,
        busy_poll_s: float = BUSY_POLL_S,
    ) -> None:
        """``progress`` keeps the target side answering (``get_new_notifs``); ``errors``
        are the backend's exception classes, contained when progress or a check raises."""
        self._progress_fn = progress
        self._serve_poll_s = serve_poll_s
        self._busy_poll_s = busy_poll_s
        self._errors = errors
        self._jobs: queue.SimpleQueue[_Job[Any] | None] = queue.SimpleQueue()
        self._watches: list[_Watch] = []  # touched on the agent thread only
        self._serving = False  # likewise
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        if self._stopped:
            raise RuntimeError("NIXL agent thread is stopped")
        future: Future[T] = Future()
        self._jobs.put(_Job(future, fn, args))
        return future

    def watch(self, key: object, check: Callable[[], str]) -> Future[str]:
        """Resolve with ``check()``'s first answer other than "PROC" (or its error);
        ``check`` runs on the agent thread. ``unwatch(key)`` gives up on it."""
        result: Future[str] = Future()
        result.set_running_or_notify_cancel()  # only the agent thread settles it
        self.submit(self._add_watch, _Watch(key, check, result))
        return result

    def unwatch(self, key: object) -> Future[None]:
        """Stop checking ``key`` (its future resolves "ABANDONED" if still pending)."""
        return self.submit(self._drop_watch, key)

    def set_serving(self, serving: bool) -> None:
        """Progress every ``serve_poll_s`` while peers may be reading from this agent."""
        self.submit(setattr, self, "_serving", serving)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Run the jobs already queued, then end the thread."""
        if not self._stopped:
            self._stopped = True
            self._jobs.put(None)
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self._poll_interval())
            except queue.Empty:
                job = _IDLE
            if job is None:
                self._settle_watches("STOPPED")
                return
            if job is not _IDLE:
                self._execute(job)
            if self._watches or self._serving:
                # Checking our own transfers must not starve peers reading from us.
                self._progress()
            if self._watches:
                self._check_watches()

    def _poll_interval(self) -> float | None:
        if self._watches:
            return self._busy_poll_s
        if self._serving:
            return self._serve_poll_s
        return None  # block until a job arrives

    def _execute(self, job: _Job[Any]) -> None:
        if not job.future.set_running_or_notify_cancel():
            return
        try:
            result = job.fn(*job.args)
        except BaseException as exc:  # delivered to the caller through the future
            job.future.set_exception(exc)
        else:
            job.future.set_result(result)

    def _check_watches(self) -> None:
        pending = []
        for watch in self._watches:
            try:
                state = watch.check()
            except self._errors as exc:
                _settle(watch.future, exception=exc)
                continue
            if state == "PROC":
                pending.append(watch)
            else:
                _settle(watch.future, state)
        self._watches = pending

    def _add_watch(self, watch: _Watch) -> None:
        self._watches.append(watch)  # the list is replaced each round: look it up now

    def _drop_watch(self, key: object) -> None:
        for watch in [w for w in self._watches if w.key is key]:
            _settle(watch.future, "ABANDONED")
            self._watches.remove(watch)

    def _settle_watches(self, state: str) -> None:
        for watch in self._watches:
            _settle(watch.future, state)
        self._watches = []

    def _progress(self) -> None:
        try:
            self._progress_fn()
        except self._errors as exc:
            logger.debug("NIXL progress call failed: %r", exc)


def _settle(
    future: Future[str], state: str = "", *, exception: BaseException | None = None
) -> None:
    try:
        if exception is not None:
            future.set_exception(exception)
        else:
            future.set_result(state)
    except InvalidStateError:  # already settled
        pass


_IDLE: _Job[Any] = _Job(Future(), lambda: None, ())
