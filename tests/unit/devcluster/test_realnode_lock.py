"""One real node per machine: the lock names its holder and dies with it."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tandem.devcluster.realnode.lock import (
    LockHolder,
    NodeLock,
    RealNodeBusyError,
    current_holder,
)


def test_a_second_holder_is_refused_with_the_first_ones_pid_and_dir(tmp_path: Path) -> None:
    path = tmp_path / "run" / "realnode.lock"
    first = NodeLock(path)
    first.acquire(LockHolder(pid=111, root="/a/realnode"))
    assert current_holder(path) == LockHolder(pid=111, root="/a/realnode")
    with pytest.raises(RealNodeBusyError) as busy:
        NodeLock(path).acquire(LockHolder(pid=222, root="/b/realnode"))
    assert "pid 111, state dir /a/realnode" in str(busy.value)
    assert str(busy.value).endswith("tandem dev cluster down --state-dir /a")
    assert "\n" not in str(busy.value)
    first.release()
    assert current_holder(path) is None


def test_the_lock_is_dropped_when_its_holder_is_killed(tmp_path: Path) -> None:
    path = tmp_path / "realnode.lock"
    script = (
        "import os, sys, time\n"
        "from pathlib import Path\n"
        "from tandem.devcluster.realnode.lock import LockHolder, NodeLock\n"
        f"NodeLock(Path({str(path)!r})).acquire(LockHolder(os.getpid(), '/k/realnode'))\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert current_holder(path) == LockHolder(pid=holder.pid, root="/k/realnode")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
    assert current_holder(path) is None
