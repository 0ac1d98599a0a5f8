"""`tandem up` refuses what it cannot start in one line that says what runs and what to do."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tandem.devcluster.processes import ProcessRecord, record_of, stop
from tandem.runtime.launcher import LaunchError, check_not_running, choose_port
from tandem.runtime.state import ClusterState, Phase, ProcessState, cluster_dir, write_state

HOST = "127.0.0.1"
LISTEN = (
    "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
    "print(s.getsockname()[1], flush=True); time.sleep(120)"
)


@dataclass
class Listener:
    record: ProcessRecord
    port: int


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[Listener]:
    """Another process listening on a loopback port (what a running frontend is)."""
    child = subprocess.Popen(
        [sys.executable, "-c", LISTEN], stdout=subprocess.PIPE, start_new_session=True
    )
    assert child.stdout is not None
    port = int(child.stdout.readline())
    record = record_of("listener", child, tmp_path / "listener.log")
    try:
        yield Listener(record, port)
    finally:
        stop(record, grace_s=5.0)


def _record_running(home: Path, name: str, process: Listener) -> None:
    """A state file whose supervisor and frontend are ``process``."""
    directory = cluster_dir(name, home)
    directory.mkdir(parents=True)
    pid, ticks = process.record.pid, process.record.start_ticks
    write_state(
        directory,
        ClusterState(
            cluster=name,
            phase=Phase.RUNNING,
            endpoint=f"http://{HOST}:{process.port}/v1",
            supervisor_pid=pid,
            supervisor_start_ticks=ticks,
            frontend=ProcessState("frontend", "frontend", process.port, pid, ticks, "f.log"),
        ),
    )


def test_the_same_cluster_twice_says_it_runs_and_how_to_stop_it(
    tmp_path: Path, listener: Listener
) -> None:
    _record_running(tmp_path, "reference", listener)
    with pytest.raises(LaunchError) as caught:
        check_not_running(cluster_dir("reference", tmp_path), "reference")
    assert str(caught.value) == (
        f"cluster 'reference' is already running (pid {listener.record.pid}, port "
        f"{listener.port}): use it, or `tandem down --name reference` first"
    )


def test_a_port_held_by_another_local_cluster_names_that_cluster(
    tmp_path: Path, listener: Listener
) -> None:
    _record_running(tmp_path, "other", listener)
    with pytest.raises(LaunchError) as caught:
        choose_port(listener.port, tmp_path)
    assert str(caught.value) == (
        f"cluster 'other' is already running (pid {listener.record.pid}, port "
        f"{listener.port}): use it, or `tandem down --name other` first; or pass --port N "
        "(0 picks a free one) to run beside it"
    )


def test_a_port_held_by_anything_else_names_the_process(tmp_path: Path, listener: Listener) -> None:
    with pytest.raises(LaunchError) as caught:
        choose_port(listener.port, tmp_path)
    prefix = f"port {listener.port} on {HOST} is in use by pid {listener.record.pid} ("
    suffix = "): stop it, or pass --port N (0 picks a free one)"
    message = str(caught.value)
    assert message.startswith(prefix) and message.endswith(suffix), message
    command = message.removeprefix(prefix).removesuffix(suffix)
    # Its command line, on one line and cut short: enough to recognise it.
    assert command.startswith(f"{Path(sys.executable).name} -c import socket, time;")
    assert len(command) <= 100 and command.endswith("...")


def test_port_zero_picks_a_free_one(tmp_path: Path) -> None:
    assert choose_port(0, tmp_path) > 0
