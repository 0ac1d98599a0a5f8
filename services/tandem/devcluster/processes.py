"""Start, identify, measure and stop the control-plane processes.

Each component runs in its own session (``start_new_session=True``), so its pid is also its
process-group id: stopping signals the whole group and nothing forked by a component is
left behind. A record keeps the kernel start time of the process next to its pid, so a
later ``down`` never signals an unrelated process that reused the pid. Linux only (/proc).

A child can also be tied to the process that started it (``die_with_parent``): the kernel
sends it a signal when that process dies, however it dies, so a crashed test run or
supervisor leaves nothing behind. Control-plane components tied to a test session get
SIGKILL: their data is throwaway, and a kube-apiserver sent SIGTERM while etcd dies with it
can sit in its graceful shutdown for minutes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

_POLL_INTERVAL_S = 0.05
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """Enough to find a detached component again from another process."""

    name: str
    pid: int
    start_ticks: int
    log: str


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> None:
    """In a child, before exec: get ``sig`` when the parent dies (``preexec_fn``).

    Only calls prctl(2), which is safe between fork and exec."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)


def spawn(
    name: str,
    argv: Sequence[str],
    log_path: Path,
    *,
    tie_to_parent: bool = False,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session, stdout and stderr appended to ``log_path``;
    with ``tie_to_parent`` it is stopped when this process dies. ``env`` is added to
    this process's environment."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        # The child keeps its own copy of the descriptor; ours can close right away.
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            preexec_fn=partial(die_with_parent, signal.SIGKILL) if tie_to_parent else None,
            env=None if env is None else {**os.environ, **env},
        )


def record_of(name: str, child: subprocess.Popen[bytes], log_path: Path) -> ProcessRecord:
    """The record of a just-spawned child (its start time read from /proc)."""
    ticks = _read_start_ticks(child.pid)
    # A child that already exited has no /proc entry; -1 never matches, so it counts as gone.
    start_ticks = -1 if ticks is None else ticks
    return ProcessRecord(name=name, pid=child.pid, start_ticks=start_ticks, log=str(log_path))


def is_running(record: ProcessRecord) -> bool:
    """True when the recorded process still exists, is the same one, and some thread of
    it has not yet exited."""
    stat = _read_stat(record.pid)
    if stat is None:
        return False
    state, start_ticks = stat
    if start_ticks != record.start_ticks:
        return False
    # The main thread shows as a zombie as soon as it exits, while the other threads may
    # still be on their way out, holding the process's descriptors: a SIGKILLed server
    # keeps accepting connections until the last of them is gone.
    return state != "Z" or _any_thread_alive(record.pid)


def _any_thread_alive(pid: int) -> bool:
    try:
        threads = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return False
    return any((stat := _read_stat(pid, tid)) is not None and stat[0] != "Z" for tid in threads)


def rss_bytes(record: ProcessRecord) -> int:
    """Resident set size of the recorded process, 0 when it is gone."""
    if not is_running(record):
        return 0
    try:
        status = Path(f"/proc/{record.pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def stop(record: ProcessRecord, *, grace_s: float = 10.0) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace_s``; returns once it is gone."""
    if not is_running(record):
        _reap(record.pid)
        return
    _signal_group(record.pid, signal.SIGTERM)
    if not _wait_gone(record, grace_s):
        _signal_group(record.pid, signal.SIGKILL)
        if not _wait_gone(record, 5.0):
            raise RuntimeError(f"{record.name} (pid {record.pid}) survived SIGKILL")
    # The components do not fork, but anything one did fork shares its process group and
    # may have ignored SIGTERM. Sent right after the leader exited: for this to hit a
    # stranger the kernel would have to wrap the pid space within milliseconds.
    _signal_group(record.pid, signal.SIGKILL)


def _wait_gone(record: ProcessRecord, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        _reap(record.pid)
        if not is_running(record):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_INTERVAL_S)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _reap(pid: int) -> None:
    """Collect the exit status when the process is our own child, so it leaves no zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _read_stat(pid: int, tid: int | None = None) -> tuple[str, int] | None:
    """State and start time of process ``pid``, or of its thread ``tid``."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    try:
        raw = Path(path).read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces or parentheses; it ends at the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); field 22 (starttime) is fields[19].
    return fields[0], int(fields[19])


def _read_start_ticks(pid: int) -> int | None:
    stat = _read_stat(pid)
    return None if stat is None else stat[1]
