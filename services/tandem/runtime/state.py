"""Where a local cluster's files live, and its state file (pids, ports, endpoint).

``$TANDEM_HOME/clusters/<name>/`` (``~/.tandem`` when unset) holds ``state.json``, the
documents the processes read, and ``logs/``. Process records carry the kernel start time
next to each pid, so ``tandem down`` never signals an unrelated process that reused it.
"""

from __future__ import annotations

import enum
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tandem.devcluster.processes import ProcessRecord


class Phase(enum.StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    FAILED = "failed"


def tandem_home() -> Path:
    home = os.environ.get("TANDEM_HOME")
    return Path(home).expanduser() if home else Path.home() / ".tandem"


def clusters_dir(home: Path | None = None) -> Path:
    return (home or tandem_home()) / "clusters"


def cluster_dir(name: str, home: Path | None = None) -> Path:
    return clusters_dir(home) / name


def state_path(directory: Path) -> Path:
    return directory / "state.json"


@dataclass(frozen=True, slots=True)
class ProcessState:
    name: str
    component: str  # frontend | prefill | decode
    port: int
    pid: int
    start_ticks: int
    log: str
    retiring: bool = False  # out of membership, draining before it is stopped

    @property
    def record(self) -> ProcessRecord:
        return ProcessRecord(self.name, self.pid, self.start_ticks, self.log)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass(slots=True)
class ClusterState:
    cluster: str
    phase: Phase
    endpoint: str
    supervisor_pid: int
    supervisor_start_ticks: int
    frontend: ProcessState | None = None
    workers: list[ProcessState] = field(default_factory=list)
    message: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ClusterState:
        data = json.loads(text)
        frontend = data.pop("frontend")
        workers = data.pop("workers")
        return cls(
            **{**data, "phase": Phase(data["phase"])},
            frontend=ProcessState(**frontend) if frontend else None,
            workers=[ProcessState(**w) for w in workers],
        )

    @property
    def supervisor(self) -> ProcessRecord:
        return ProcessRecord("supervisor", self.supervisor_pid, self.supervisor_start_ticks, "")


def write_state(directory: Path, state: ClusterState) -> None:
    """Atomic replace: readers never see half a file."""
    path = state_path(directory)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(state.to_json())
    os.replace(tmp, path)


def read_state(directory: Path) -> ClusterState | None:
    try:
        return ClusterState.from_json(state_path(directory).read_text())
    except FileNotFoundError:
        return None


def list_clusters(home: Path | None = None) -> list[str]:
    root = clusters_dir(home)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if state_path(p).exists())
