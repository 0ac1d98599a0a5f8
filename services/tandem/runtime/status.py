"""``tandem status``: what a local cluster runs, from its state file and live probes."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tandem.devcluster.processes import is_running
from tandem.runtime.planning_record import PlanningRecord
from tandem.runtime.planning_record import read_record as read_planning_record
from tandem.runtime.scaling_record import AutoscalingRecord, read_record
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
    autoscaling: AutoscalingRecord | None = None,
    planning: PlanningRecord | None = None,
) -> dict[str, Any]:
    """Pure: the status document from the state, which pids live, the frontend's
    view of worker health (None when the frontend did not answer), the local
    autoscaler's record (None when the cluster does not autoscale) and the re-planner's
    (None when it does not plan: ``planning`` is then the operator's ``status.plan`` and
    ``status.workload``, with the shape that runs and the rollouts)."""
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
                "retiring": w.retiring,
                "log": w.log,
            }
            for w in state.workers
            if w.component == pool
        ]
        serving = [w for w in workers if not w["retiring"]]
        pools[pool] = {
            "replicas": len(serving),
            "ready": sum(1 for w in serving if w["alive"] and w["healthy"]),
            "workers": workers,
        }
        record = autoscaling.pools.get(pool) if autoscaling else None
        if record is not None:
            pools[pool]["autoscaling"] = {
                "desired": record.desired,
                "reason": record.reason,
                "message": record.message,
                "queue_depth": {
                    "requests": record.queued_requests,
                    "tokens": record.queued_tokens,
                },
                "last_scale_time": record.last_scale_time,
                "last_scale_reason": record.last_scale_reason,
                "last_scale_message": record.last_scale_message,
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
        "autoscaling": (
            {
                "interval_seconds": autoscaling.interval_seconds,
                "rounds": autoscaling.ticks,
                "error": autoscaling.error,
            }
            if autoscaling
            else None
        ),
        "planning": planning.model_dump(mode="json", by_alias=True, exclude_none=True)
        if planning
        else None,
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
    return compute_status(
        state, alive, seen, read_record(directory), read_planning_record(directory)
    )


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
        line = f"{pool:<9} {info['ready']}/{info['replicas']} ready"
        scaling = info.get("autoscaling")
        if scaling:
            queue = scaling["queue_depth"]
            line += (
                f"  desired {scaling['desired']}  queue {queue['requests']} req /"
                f" {queue['tokens']} tok  ({scaling['reason']})"
            )
        lines.append(line)
        if scaling and scaling["last_scale_reason"]:
            lines.append(
                f"  last scale: {scaling['last_scale_reason']}: {scaling['last_scale_message']}"
            )
        for w in info["workers"]:
            health = "dead" if not w["alive"] else ("healthy" if w["healthy"] else "unhealthy")
            if w.get("retiring") and w["alive"]:
                health = "draining"
            lines.append(f"  {w['name']:<12} {w['address']:<22} pid {w['pid']:<8} {health}")
    autoscaling = status.get("autoscaling")
    if autoscaling:
        lines.append(
            f"autoscale every {autoscaling['interval_seconds']:g}s, {autoscaling['rounds']} rounds"
            + (f"; {autoscaling['error']}" if autoscaling["error"] else "")
        )
    if status.get("planning"):
        lines.extend(render_planning(status["planning"]))
    if status.get("message"):
        lines.append(f"message   {status['message']}")
    return "\n".join(lines)


def render_planning(planning: dict[str, Any]) -> list[str]:
    """Pure: the plan, what it predicts, planned against observed workload, rollouts."""
    lines = [f"shape     {planning['shape']}"]
    plan = planning.get("plan")
    if plan:
        lines.append(f"plan      {plan['mode']}, {plan['outcome']}: {plan['message']}")
        predicted = plan.get("predicted")
        if predicted:
            lines.append(
                f"  predicted TTFT p90 {predicted['ttftP90Seconds']:g} s, "
                f"ITL p90 {predicted['itlP90Seconds'] * 1e3:.1f} ms"
                + (
                    f", {plan['tokensPerSecondPerGpu']:g} tokens/s/GPU"
                    if plan.get("tokensPerSecondPerGpu") is not None
                    else ""
                )
            )
        if plan.get("clockSources"):
            lines.append(f"  clock: {', '.join(plan['clockSources'])}")
    workload = planning.get("workload")
    if workload:
        planned = workload["planned"]
        lines.append(
            f"workload  planned ISL {planned['isl']} OSL {planned['osl']} "
            f"({planned['source']}); {workload['replans']} re-plan(s), "
            f"{planning['rollouts']} rollout(s)"
        )
        observed = workload.get("observed")
        if observed:
            lines.append(
                f"  observed ISL p50 {observed['islP50']} OSL p50 {observed['oslP50']}, "
                f"{observed['requestsPerSecond']:g} req/s over {observed['windowSeconds']:g} s"
            )
        if workload.get("outside"):
            lines.append(f"  outside the plan: {workload['outside']}")
    if planning.get("rolling"):
        lines.append(f"  rolling: {planning['rolling']}")
    if planning.get("error"):
        lines.append(f"  error: {planning['error']}")
    return lines
