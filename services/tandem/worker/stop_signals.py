"""Leaving at once when asked to stop before there is anything to drain.

In a container the first process is PID 1 of its PID namespace, and the kernel delivers
PID 1 no signal it has no handler for. Without one, a worker pod deleted while its model
loads, or a Ray group's pod while the group joins (its LeaderWorkerSet deletes the whole
group when one pod fails), ignores the kubelet's SIGTERM and waits out its termination
grace period, the longest answer's time, before it is killed. Until the worker serves,
nothing is in flight, so a stop ends the process there and then; once it serves, the
worker's draining handler takes over (``tandem.worker.main``).
"""

from __future__ import annotations

import os
import signal
from types import FrameType


def exit_at_once_on_stop() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_now)


def _exit_now(signum: int, _frame: FrameType | None) -> None:
    # Not SystemExit: a model loading in another thread would be waited for at exit.
    os._exit(128 + signum)
