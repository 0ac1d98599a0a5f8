"""A worker, or a Ray group's launcher, asked to stop before it serves leaves at once, also
as PID 1 of its own PID namespace (as in a container, where the kernel delivers PID 1 no
signal it has no handler for): a pod deleted while it loads does not wait out its grace
period. Each process runs under ``unshare --pid --fork``; the control without the
handler shows the rule the test stands on."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.parallel]

LOADING = "import time; print('loading', flush=True); time.sleep(60)"
WITH_HANDLER = (
    "from tandem.worker.stop_signals import exit_at_once_on_stop; exit_at_once_on_stop(); "
    + LOADING
)


def _as_pid_one(code: str) -> tuple[subprocess.Popen[str], psutil.Process]:
    """``python -c code`` as PID 1 of a new PID namespace; (the unshare process, that
    python process as this namespace sees it)."""
    outer = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert outer.stdout is not None and outer.stdout.readline() == "loading\n"
    (inner,) = psutil.Process(outer.pid).children()
    return outer, inner


def test_pid_one_ignores_a_stop_it_has_no_handler_for() -> None:
    outer, inner = _as_pid_one(LOADING)
    try:
        inner.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        assert inner.is_running() and outer.poll() is None
    finally:
        inner.kill()
        outer.wait(10)


def test_with_the_handler_a_stop_before_serving_ends_it_at_once() -> None:
    outer, inner = _as_pid_one(WITH_HANDLER)
    inner.send_signal(signal.SIGTERM)
    # unshare --fork exits with its child's status.
    assert outer.wait(10) == 128 + signal.SIGTERM
