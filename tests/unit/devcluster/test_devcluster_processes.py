"""Process lifecycle with real (harmless) processes: no network, a second at most."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tandem.devcluster import processes
from tandem.devcluster.ports import allocate_ports
from tandem.devcluster.probes import wait_until


def _spawn(tmp_path: Path, code: str) -> processes.ProcessRecord:
    log = tmp_path / "p.log"
    child = processes.spawn("p", [sys.executable, "-c", code], log)
    return processes.record_of("p", child, log)


def test_stop_terminates_the_whole_process_group(tmp_path: Path) -> None:
    # The leader forks a grandchild that would survive if only the leader were signalled.
    code = (
        "import os, subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(c.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    record = _spawn(tmp_path, code)
    log = Path(record.log)
    wait_until(lambda: log.read_text().strip() != "", timeout_s=10, what="grandchild pid")
    grandchild = int(log.read_text().split()[0])
    assert processes.is_running(record)
    assert processes.rss_bytes(record) > 0
    assert os.getpgid(grandchild) == record.pid

    processes.stop(record, grace_s=5)

    assert not processes.is_running(record)
    wait_until(lambda: not _alive(grandchild), timeout_s=5, what="grandchild exit")


def test_stop_escalates_to_sigkill(tmp_path: Path) -> None:
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    record = _spawn(tmp_path, code)
    log = Path(record.log)
    wait_until(lambda: "ready" in log.read_text(), timeout_s=10, what="SIGTERM ignored")
    began = time.monotonic()
    processes.stop(record, grace_s=0.3)
    assert not processes.is_running(record)
    assert time.monotonic() - began < 5


def test_a_reused_pid_is_not_ours(tmp_path: Path) -> None:
    record = _spawn(tmp_path, "import time; time.sleep(60)")
    impostor = processes.ProcessRecord(
        name="p", pid=record.pid, start_ticks=record.start_ticks + 1, log=record.log
    )
    assert not processes.is_running(impostor)
    processes.stop(impostor)  # must not signal the real process
    assert processes.is_running(record)
    processes.stop(record)
    assert not processes.is_running(record)


def test_a_process_whose_main_thread_exited_runs_until_its_last_thread_does(
    tmp_path: Path,
) -> None:
    # The main thread leaves with pthread_exit (ctypes drops the GIL around the call);
    # another thread goes on, as a killed server's threads do while they tear down.
    code = (
        "import ctypes, threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,)).start()\n"
        "ctypes.CDLL(None).pthread_exit(None)\n"
    )
    record = _spawn(tmp_path, code)
    wait_until(lambda: _exited_or_zombie(record.pid), timeout_s=10, what="main thread exit")
    assert processes.is_running(record)
    processes.stop(record, grace_s=5)
    assert not processes.is_running(record)


def test_stop_of_an_exited_process_is_a_no_op(tmp_path: Path) -> None:
    record = _spawn(tmp_path, "pass")
    wait_until(lambda: _exited_or_zombie(record.pid), timeout_s=10, what="exit")
    processes.stop(record)
    assert not processes.is_running(record)


def test_allocated_ports_are_distinct() -> None:
    ports = allocate_ports(6)
    assert len(set(ports)) == 6
    assert all(0 < p < 65536 for p in ports)


def _exited_or_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return state[state.rindex(")") + 2] != "Z"  # a zombie has already died


@pytest.mark.parametrize("tied", [True, False])
def test_a_tied_child_dies_with_the_process_that_started_it(tmp_path: Path, tied: bool) -> None:
    # An intermediate parent spawns `sleep`, reports its pid, then is SIGKILLed: no
    # teardown runs, exactly like a crashed pytest.
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from tandem.devcluster.processes import spawn\n"
        f"child = spawn('s', ['sleep', '60'], Path({str(tmp_path / 'log')!r}), "
        f"tie_to_parent={tied})\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    try:
        parent.kill()
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(child_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _alive(child_pid) is (not tied)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child_pid, signal.SIGKILL)
