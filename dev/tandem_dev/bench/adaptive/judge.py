"""A row's figures from its live run (pure): SLO attainment, GPU-seconds (every worker
process that existed is one TP1 GPU, starting and draining ones included), goodput
(answer tokens of requests within the SLO per GPU-second) and, for planning auto, the
re-plans and rollouts ``planning.json`` counted."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tandem.api.v1alpha1 import PoolRole
from tandem.runtime.planning_record import PlanningRecord
from tandem.sim.metrics import Slo
from tandem_dev.bench.adaptive.rows import PLANNING, STATIC_ROWS
from tandem_dev.bench.autoscale_live.judge import (
    compute_live_attainment,
    compute_worker_seconds,
    within_slo,
)
from tandem_dev.bench.autoscale_live.replay import LiveRun


@dataclass(frozen=True, slots=True)
class RowFigures:
    attainment: float
    gpu_seconds: float
    goodput_per_gpu: float  # tokens/s/GPU within the SLO
    requests: int
    failed: int
    replans: int | None  # None: the row does not plan
    rollouts: int | None
    shape: str  # what ran at the end


def judge_row(
    run: LiveRun, seconds: float, slo: Slo, planning: PlanningRecord | None, shape: str
) -> RowFigures:
    gpu_seconds = sum(compute_worker_seconds(run.samples, role, seconds) for role in PoolRole)
    good_tokens = sum(s.output_tokens for s in run.served if within_slo(s, slo))
    workload = planning.workload if planning is not None else None
    return RowFigures(
        attainment=compute_live_attainment(run.served, slo),
        gpu_seconds=gpu_seconds,
        goodput_per_gpu=good_tokens / gpu_seconds if gpu_seconds > 0 else 0.0,
        requests=len(run.served),
        failed=sum(1 for s in run.served if s.error),
        replans=workload.replans if workload is not None else None,
        rollouts=planning.rollouts if planning is not None else None,
        shape=planning.shape if planning is not None and planning.shape else shape,
    )


# The targets: where the load moves, planning must serve >= 95% within the SLO
# on at most 0.8x the GPU-seconds of the cheapest static deployment that does (where none
# does: serve more at no more GPU-seconds); where it holds still, come within 5% of it.
ATTAINMENT_TARGET = 0.95
MOVING_TRACES = frozenset({"bursty", "ramp", "drift"})
MOVING_GPU_SHARE, STEADY_GPU_SHARE = 0.8, 1.05


def judge_targets(trace: str, rows: Mapping[str, RowFigures | str]) -> str:
    """The planning row against the static rows of one trace (``tandem plan``'s and
    AIConfigurator's; a string is a row that did not run), in words: ``met: ...`` or
    ``missed: ...`` (pure)."""
    planned = rows.get(PLANNING)
    statics = {name: f for name in STATIC_ROWS if isinstance(f := rows.get(name), RowFigures)}
    if not isinstance(planned, RowFigures) or not statics:
        return "not judged: the planning row or every static row is missing"
    share = MOVING_GPU_SHARE if trace in MOVING_TRACES else STEADY_GPU_SHARE
    meeting = {n: f for n, f in statics.items() if f.attainment >= ATTAINMENT_TARGET}
    if meeting:
        name, best = min(meeting.items(), key=lambda item: item[1].gpu_seconds)
    else:  # nothing static reaches 95%: the one that serves the most is the bar
        name, best = max(statics.items(), key=lambda item: item[1].attainment)
    ratio = planned.gpu_seconds / best.gpu_seconds if best.gpu_seconds else float("inf")
    figures = (
        f"{planned.attainment:.1%} within SLO on {ratio:.2f}x the GPU-seconds of {name} "
        f"({best.attainment:.1%}); the target is >= {ATTAINMENT_TARGET:.0%} on <= {share:g}x"
    )
    if planned.attainment >= ATTAINMENT_TARGET and ratio <= share:
        return f"met: {figures}"
    if not meeting and planned.attainment > best.attainment and ratio <= 1.0:
        return f"met (more served at no more GPU-seconds): {figures}"
    return f"missed: {figures}"
