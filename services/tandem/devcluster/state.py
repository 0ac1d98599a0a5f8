"""The state file (``state.json``) that lets a later command find a detached cluster."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from tandem.devcluster.layout import StateLayout
from tandem.devcluster.processes import ProcessRecord
from tandem.devcluster.realnode.plan import RealNodeRecord


class ClusterState(BaseModel):
    """What ``dev cluster up`` started. Written after every spawned process, so ``down``
    can clean up even after a start-up that failed half-way."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    api_url: str
    kubeconfig: str
    profile: str
    with_lws: bool
    started_at: float
    ready_after_s: float | None = None
    processes: tuple[ProcessRecord, ...] = ()
    # Profiles with a real node: its supervisor and plan (stopped before the processes).
    real_node: RealNodeRecord | None = None


def load_state(layout: StateLayout) -> ClusterState | None:
    """The recorded state, or None when no cluster was ever started in this directory."""
    try:
        raw = layout.state_file.read_text()
    except FileNotFoundError:
        return None
    return ClusterState.model_validate_json(raw)


def save_state(layout: StateLayout, state: ClusterState) -> None:
    layout.root.mkdir(parents=True, exist_ok=True)
    tmp = layout.state_file.with_name(layout.state_file.name + ".tmp")
    tmp.write_text(state.model_dump_json(indent=2) + "\n")
    tmp.replace(layout.state_file)
