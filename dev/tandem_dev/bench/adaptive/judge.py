"""A row's figures from its live run (pure): SLO attainment, GPU-seconds (every worker
process that existed is one TP1 GPU, starting and draining ones included), goodput
(answer tokens of requests within the SLO per GPU-second) and, for planning auto, the
re-plans and rollouts ``planning.json`` counted."""

from __future__ import annotations

from dataclasses import dataclass

from tandem.api.v1alpha1 import PoolRole
from tandem.runtime.planning_record import PlanningRecord
from tandem.sim.metrics import Slo
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
