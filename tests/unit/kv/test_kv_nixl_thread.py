from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from tandem.kv.nixl_thread import AgentThread


class Progress:
    def __init__(self) -> None:
        self.calls = 0
        self.threads: set[str] = set()

    def __call__(self) -> None:
        self.calls += 1
        self.threads.add(threading.current_thread().name)


def _eventually(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.001)


def _observe(seconds: float) -> None:
    """An observation window for a property that must NOT change (nothing to poll for)."""
    threading.Event().wait(seconds)


def test_an_idle_agent_thread_never_wakes_to_progress() -> None:
    progress = Progress()
    agent = AgentThread("nixl-test", progress, 0.001, (OSError,))
    try:
        assert agent.submit(lambda: "ready").result(5) == "ready"
        _observe(0.3)  # a 1 ms poller would have called progress ~300 times by now
        assert progress.calls == 0
    finally:
        agent.stop()


def test_progress_runs_on_the_agent_thread_only_while_reads_are_expected() -> None:
    progress = Progress()
    agent = AgentThread("nixl-test", progress, 0.001, (OSError,))
    try:
        agent.set_serving(True)
        _eventually(lambda: progress.calls >= 3)
        assert progress.threads == {"nixl-test"}
        agent.set_serving(False)
        agent.submit(lambda: None).result(5)  # the switch has been applied
        before = progress.calls
        _observe(0.1)
        assert progress.calls <= before + 1  # at most the round already under way
    finally:
        agent.stop()


def test_a_watch_resolves_when_the_transfer_leaves_proc() -> None:
    states = iter(["PROC", "PROC", "PROC", "DONE"])
    seen: list[str] = []

    def check() -> str:
        seen.append(threading.current_thread().name)
        return next(states)

    agent = AgentThread("nixl-test", Progress(), 0.001, (OSError,))
    try:
        assert agent.watch("xfer", check).result(5) == "DONE"
        assert seen == ["nixl-test"] * 4
    finally:
        agent.stop()


def test_watches_added_while_others_are_pending_are_all_checked() -> None:
    agent = AgentThread("nixl-test", Progress(), 0.001, (OSError,))
    try:
        slow_key = object()
        slow = agent.watch(slow_key, lambda: "PROC")
        fast = [agent.watch(i, lambda: "DONE") for i in range(5)]
        assert [f.result(5) for f in fast] == ["DONE"] * 5
        assert not slow.done()
        agent.unwatch(slow_key).result(5)
    finally:
        agent.stop()


def test_a_failing_check_reaches_the_watcher_and_unwatch_abandons() -> None:
    def broken() -> str:
        raise OSError("peer disconnected")

    agent = AgentThread("nixl-test", Progress(), 0.001, (OSError,))
    try:
        with pytest.raises(OSError, match="peer disconnected"):
            agent.watch("a", broken).result(5)
        key = object()
        stuck = agent.watch(key, lambda: "PROC")
        agent.unwatch(key).result(5)
        assert stuck.result(5) == "ABANDONED"
    finally:
        agent.stop()


def test_job_errors_reach_the_caller_and_the_thread_survives() -> None:
    def boom() -> None:
        raise ValueError("bad descriptor")

    agent = AgentThread("nixl-test", Progress(), 0.01, (OSError,))
    try:
        with pytest.raises(ValueError, match="bad descriptor"):
            agent.submit(boom).result(5)
        assert agent.submit(lambda: 41 + 1).result(5) == 42
    finally:
        agent.stop()


def test_progress_errors_are_contained() -> None:
    failures = Progress()

    def flaky() -> None:
        failures()
        raise OSError("progress failed")

    agent = AgentThread("nixl-test", flaky, 0.001, (OSError,))
    try:
        agent.set_serving(True)
        _eventually(lambda: failures.calls >= 3)
        assert agent.submit(lambda: "alive").result(5) == "alive"
    finally:
        agent.stop()


def test_stop_runs_queued_jobs_then_refuses_new_ones() -> None:
    agent = AgentThread("nixl-test", Progress(), 0.01, (OSError,))
    queued = agent.submit(lambda: "done")
    agent.stop()
    assert queued.result(5) == "done"
    with pytest.raises(RuntimeError):
        agent.submit(lambda: None)
