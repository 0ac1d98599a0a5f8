from __future__ import annotations

import threading
import time

import pytest

from tandem.kv.nixl_thread import AgentThread


class Idle:
    def __init__(self) -> None:
        self.calls = 0
        self.threads: set[str] = set()

    def __call__(self) -> None:
        self.calls += 1
        self.threads.add(threading.current_thread().name)


def _eventually(check: object, timeout_s: float = 5.0) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.001)


def test_jobs_and_idle_progress_run_on_the_one_agent_thread() -> None:
    idle = Idle()
    agent = AgentThread("nixl-test", idle, idle_poll_s=0.001, idle_errors=(OSError,))
    try:
        names = [agent.submit(lambda: threading.current_thread().name).result(5) for _ in range(3)]
        assert set(names) == {"nixl-test"}
        _eventually(lambda: idle.calls >= 3)
        assert idle.threads == {"nixl-test"}
    finally:
        agent.stop()


def test_job_errors_reach_the_caller_and_the_thread_survives() -> None:
    def boom() -> None:
        raise ValueError("bad descriptor")

    agent = AgentThread("nixl-test", lambda: None, idle_poll_s=0.01, idle_errors=(OSError,))
    try:
        with pytest.raises(ValueError, match="bad descriptor"):
            agent.submit(boom).result(5)
        assert agent.submit(lambda: 41 + 1).result(5) == 42
    finally:
        agent.stop()


def test_idle_errors_are_contained() -> None:
    def flaky() -> None:
        raise OSError("progress failed")

    agent = AgentThread("nixl-test", flaky, idle_poll_s=0.001, idle_errors=(OSError,))
    try:
        time.sleep(0.01)  # let several failing progress calls happen
        assert agent.submit(lambda: "alive").result(5) == "alive"
    finally:
        agent.stop()


def test_stop_runs_queued_jobs_then_refuses_new_ones() -> None:
    agent = AgentThread("nixl-test", lambda: None, idle_poll_s=0.01, idle_errors=(OSError,))
    queued = agent.submit(lambda: "done")
    agent.stop()
    assert queued.result(5) == "done"
    with pytest.raises(RuntimeError):
        agent.submit(lambda: None)
