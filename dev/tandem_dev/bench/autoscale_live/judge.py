"""A live run's figures against the SLO oracle's (pure).

- **attainment**: share of the trace's requests answered within the SLO (TTFT and the
  request's mean ITL, as the oracle judges), overall and over the intervals the oracle
  can serve at 100% with the pools' limits;
- **worker-seconds**: worker processes that existed (starting, serving or draining),
  over the trace's duration, against the oracle's per-interval plans (GPU-seconds, as
  every worker of the live replay is one TP1 GPU);
- **reaction** and **flaps** as the simulator's figures define them
  (``tandem_dev.autoscale_sim.figures``), with the need of each constant-load stretch taken from
  the oracle run over the whole stretch (per-interval plans follow Poisson noise, which
  no autoscaler should chase).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from tandem.api.v1alpha1 import PoolRole
from tandem.runtime.scaling_record import TickRecord
from tandem.sim.cluster import Outcome
from tandem.sim.metrics import Slo
from tandem_dev.autoscale_sim.figures import Tick, compute_reactions, compute_steady_flaps
from tandem_dev.autoscale_sim.slo_oracle import IntervalPlan, attains
from tandem_dev.autoscale_sim.traces import Trace
from tandem_dev.bench.autoscale_live.replay import Served, WorkerSample


def as_outcome(served: Served) -> Outcome | None:
    """The oracle's view of an answered request; None for one that failed."""
    if served.error or served.first_token is None:
        return None
    return Outcome(served.arrival, served.first_token, served.end, served.output_tokens, False)


def within_slo(served: Served, slo: Slo) -> bool:
    outcome = as_outcome(served)
    return outcome is not None and attains(outcome, slo)


def compute_live_attainment(
    served: Sequence[Served], slo: Slo, plans: Sequence[IntervalPlan] | None = None
) -> float:
    """Share of requests within the SLO; with ``plans``, of those arriving in an interval
    the oracle could serve."""
    if plans is not None:
        served = [s for s in served if _plan_at(plans, s.arrival).attainable]
    if not served:
        return 1.0
    return sum(1 for s in served if within_slo(s, slo)) / len(served)


def _plan_at(plans: Sequence[IntervalPlan], t: float) -> IntervalPlan:
    i = bisect.bisect_right([p.start for p in plans], t) - 1
    return plans[max(0, min(i, len(plans) - 1))]


def compute_worker_seconds(samples: Sequence[WorkerSample], role: PoolRole, until: float) -> float:
    """Worker-seconds of a pool over [0, until]: each sample holds until the next."""
    ends = [*(s.at for s in samples[1:]), until]
    total = 0.0
    for sample, end in zip(samples, ends, strict=False):  # no samples: nothing held
        held = min(end, until) - max(0.0, sample.at)
        if held > 0:
            total += (sample.prefill if role is PoolRole.PREFILL else sample.decode) * held
    return total


def plan_workers(plan: IntervalPlan, role: PoolRole) -> int:
    return plan.prefill if role is PoolRole.PREFILL else plan.decode


def build_ticks(
    records: Sequence[TickRecord],
    role: PoolRole,
    started_wall: float,
    stretches: Sequence[IntervalPlan],
    duration_s: float,
) -> list[Tick]:
    """The autoscaler's rounds during the trace, each with the need of its stretch."""
    ticks = []
    for record in sorted(records, key=lambda r: r.tick):
        at = record.at - started_wall
        pool = record.pools.get(role.value)
        if pool is None or not 0 <= at < duration_s:
            continue
        needed = plan_workers(_plan_at(stretches, at), role)
        ticks.append(Tick(at, pool.desired, needed, pool.ready))
    return ticks


@dataclass(frozen=True, slots=True)
class PoolVerdict:
    reactions: tuple[int | None, ...]
    flaps_per_30: int | None  # None: no constant stretch of 30 rounds after settling
    worker_seconds: float
    oracle_worker_seconds: float
    peak_desired: int
    peak_needed: int


def judge_pool(
    role: PoolRole,
    trace: Trace,
    ticks: Sequence[Tick],
    samples: Sequence[WorkerSample],
    plans: Sequence[IntervalPlan],
    settle_s: float,
) -> PoolVerdict:
    flaps, _ = compute_steady_flaps(ticks, trace, settle_s)
    return PoolVerdict(
        reactions=tuple(compute_reactions(ticks)),
        flaps_per_30=flaps,
        worker_seconds=compute_worker_seconds(samples, role, trace.duration_seconds),
        oracle_worker_seconds=sum(plan_workers(p, role) * (p.end - p.start) for p in plans),
        peak_desired=max((t.desired for t in ticks), default=0),
        peak_needed=max((t.needed for t in ticks), default=0),
    )
