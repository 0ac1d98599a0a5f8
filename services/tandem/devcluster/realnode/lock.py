"""One real node per machine: an flock(2) held by the node's supervisor for its lifetime.

The lock file also says who holds it (pid, node directory), for the error a second node
gets. The kernel drops the lock when its holder dies, however it dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class LockHolder:
    pid: int
    root: str

    def describe(self) -> str:
        return f"pid {self.pid}, state dir {self.root}"


def busy_message(holder: LockHolder | None, path: Path) -> str:
    """One line: who holds the machine's real node, and how to stop it (the node's
    directory is ``realnode`` in its cluster's state directory)."""
    if holder is None:
        return f"a real node already runs on this machine (lock {path})"
    return (
        f"a real node already runs on this machine ({holder.describe()}); stop it first: "
        f"tandem dev cluster down --state-dir {Path(holder.root).parent}"
    )


class RealNodeBusyError(RuntimeError):
    """Another real node runs on this machine; the message names it."""


class NodeLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, holder: LockHolder) -> None:
        """Take the lock for ``holder``; RealNodeBusyError naming the current holder if
        it is taken."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            current = _read(fd)
            os.close(fd)
            raise RealNodeBusyError(busy_message(current, self.path)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": holder.pid, "root": holder.root}).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None


def current_holder(path: Path) -> LockHolder | None:
    """Who holds the lock now; None when nobody does (checked without taking it for
    longer than the check)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read(fd) or LockHolder(pid=-1, root="(unknown)")
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read(fd: int) -> LockHolder | None:
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        raw = json.loads(os.pread(fd, 4096, 0) or b"null")
        if raw:
            return LockHolder(pid=int(raw["pid"]), root=str(raw["root"]))
    return None
