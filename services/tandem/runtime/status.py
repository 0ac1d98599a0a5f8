"""``tandem status``: what a local cluster runs, from its state file and live probes."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tandem.devcluster.processes import is_running
from tandem.runtime.state import ClusterState, read_state

POOLS = ("prefill", "decode")


def probe_workers(endpoint: str, timeout_s: float = 2.0) -> list[dict[str, Any]] | None:
    """The frontend's view of its workers (``/readyz``), or None when unreachable."""
    url = endpoint.removesuffix("/v1") + "/readyz"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:  # 503 still carries the worker list
        body = exc.read()
    except (urllib.error.URLError, OSError):
        return None
    try:
        workers = json.loads(body).get("workers", [])
    except (ValueError, AttributeError):
        return None
    return [w for w in workers if isinstance(w, dict)]


def compute_status(
    state: ClusterState,
    alive: dict[str, bool],
    seen: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    """Pure: the status document from the state, which pids live, and the frontend's
    view of worker health (None when the frontend did not answer)."""
    healthy = {w.get("address"): bool(w.get("healthy")) for w in seen or []}
    pools: dict[str, Any] = {}
    for pool in POOLS:
        workers = [
            {
                "name": w.name,
                "address": w.address,
                "pid": w.pid,
                "alive": alive.get(w.name, False),
                "healthy": healthy.get(w.address, False),
                "log": w.log,
            }
            for w in state.workers
            if w.component == pool
        ]
        pools[pool] = {
            "replicas": len(workers),
            "ready": sum(1 for w in workers if w["alive"] and w["healthy"]),
            "workers": workers,
        }
    frontend = state.frontend
    return {
        "cluster": state.cluster,
        "phase": state.phase.value if alive.get("supervisor") else "stopped",
        "endpoint": state.endpoint,
        "message": state.message,
        "supervisor": {"pid": state.supervisor_pid, "alive": alive.get("supervisor", False)},
        "frontend": {
            "pid": frontend.pid if frontend else None,
            "port": frontend.port if frontend else None,
            "alive": alive.get("frontend", False),
            "reachable": seen is not None,
        },
        "pools": pools,
    }


def collect_status(directory: Path) -> dict[str, Any] | None:
    state = read_state(directory)
    if state is None:
        return None
    alive = {"supervisor": is_running(state.supervisor)}
    for process in [state.frontend, *state.workers]:
        if process is not None:
            alive[process.name] = is_running(process.record)
    seen = probe_workers(state.endpoint) if alive.get("frontend") else None
    return compute_status(state, alive, seen)


def render_status(status: dict[str, Any]) -> str:
    """Pure: the human-readable table."""
    lines = [
        f"cluster   {status['cluster']} ({status['phase']})",
        f"endpoint  {status['endpoint']}",
    ]
    frontend = status["frontend"]
    state = "up" if frontend["alive"] and frontend["reachable"] else "down"
    lines.append(f"frontend  pid {frontend['pid']}  {state}")
    for pool in POOLS:
        info = status["pools"][pool]
        lines.append(f"{pool:<9} {info['ready']}/{info['replicas']} ready")
        for w in info["workers"]:
            health = "dead" if not w["alive"] else ("healthy" if w["healthy"] else "unhealthy")
            lines.append(f"  {w['name']:<12} {w['address']:<22} pid {w['pid']:<8} {health}")
    if status.get("message"):
        lines.append(f"message   {status['message']}")
    return "\n".join(lines)
