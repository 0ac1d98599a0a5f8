"""An oracle in users' terms: per trace interval, the fewest replicas per pool under which
every request of the interval meets its SLO, found offline on the simulated engine.

A yardstick in the policy's own terms (pools sized to its signal targets, retired) says
nothing about users: a policy that matched it could still fail every one. This one knows
nothing about the policy: it replays each interval's requests (as the trace generated them) through
candidate deployments in virtual time (``tandem.sim.cluster``: the simulated engine's
scheduler and clock, the router's policy) and keeps the smallest -- fewest GPUs, then
fewest prefill workers -- whose every request has TTFT and mean ITL within the targets.
Each interval is judged on its own, starting from idle workers: what a perfectly
provisioned deployment needs for that interval's load, not counting requests still in
flight from the one before (the traces' intervals are long against a request's
lifetime). An interval no candidate within the pools' limits serves is marked
unattainable (attainment of its best candidate given), and the comparison leaves it out.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tandem.sim.cluster import ClusterSim, Outcome, SimRequest
from tandem.sim.metrics import Slo
from tandem.sim.planner import Limits, Setup
from tandem_dev.autoscale_sim.traces import Arrival

# A candidate whose requests are not all done this long after the interval's last
# arrival (modelled seconds) is not serving them.
DRAIN_LIMIT_S = 300.0


@dataclass(frozen=True, slots=True)
class IntervalPlan:
    start: float
    end: float
    prefill: int
    decode: int
    gpus: int
    requests: int
    attainment: float  # of the chosen deployment: 1.0 unless unattainable
    attainable: bool


def attains(outcome: Outcome, slo: Slo) -> bool:
    """One request within its targets: TTFT and its mean inter-token latency."""
    return outcome.ttft <= slo.ttft_p90_s and outcome.itl <= slo.itl_p90_s


def compute_attainment(outcomes: Sequence[Outcome], slo: Slo, expected: int) -> float:
    """Share of ``expected`` requests that finished within their targets."""
    if expected == 0:
        return 1.0
    return sum(1 for o in outcomes if attains(o, slo)) / expected


def enumerate_candidates(limits: Limits, min_decode: int) -> Iterator[tuple[int, int]]:
    """(prefill, decode) replica pairs by GPUs, then fewer prefill workers first."""
    pairs = [
        (p, d)
        for p in range(limits.max_prefill + 1)
        for d in range(max(1, min_decode), limits.max_decode + 1)
    ]
    pairs.sort(key=lambda pd: (pd[0] * limits.prefill_tp + pd[1] * limits.decode_tp, pd[0]))
    yield from pairs


def plan_interval(
    requests: Sequence[SimRequest],
    start: float,
    end: float,
    setup: Setup,
    limits: Limits,
    slo: Slo,
    min_decode: int = 1,
) -> IntervalPlan:
    """The smallest deployment serving ``requests`` (arrivals relative to ``start``)."""
    if not requests:
        gpus = min_decode * limits.decode_tp
        return IntervalPlan(start, end, 0, min_decode, gpus, 0, 1.0, True)
    best: tuple[float, int, int] | None = None
    until = requests[-1].arrival + DRAIN_LIMIT_S
    for prefill, decode in enumerate_candidates(limits, min_decode):
        outcomes = ClusterSim(setup.deployment(prefill, decode)).run_open(requests, until=until)
        attainment = compute_attainment(outcomes, slo, len(requests))
        gpus = prefill * limits.prefill_tp + decode * limits.decode_tp
        if attainment >= 1.0:
            return IntervalPlan(start, end, prefill, decode, gpus, len(requests), 1.0, True)
        if best is None or attainment > best[0]:
            best = (attainment, prefill, decode)
    assert best is not None
    attainment, prefill, decode = best
    gpus = prefill * limits.prefill_tp + decode * limits.decode_tp
    return IntervalPlan(start, end, prefill, decode, gpus, len(requests), attainment, False)


def plan_trace(
    arrivals: Sequence[Arrival],
    duration_s: float,
    interval_s: float,
    setup: Setup,
    limits: Limits,
    slo: Slo,
    min_decode: int = 1,
) -> list[IntervalPlan]:
    """One plan per ``interval_s`` of the trace (arrivals in time order)."""
    edges = [*itertools.takewhile(lambda t: t < duration_s, itertools.count(0.0, interval_s))]
    return plan_windows(arrivals, [*edges, duration_s], setup, limits, slo, min_decode)


def plan_windows(
    arrivals: Sequence[Arrival],
    edges: Sequence[float],
    setup: Setup,
    limits: Limits,
    slo: Slo,
    min_decode: int = 1,
) -> list[IntervalPlan]:
    """One plan per window between consecutive ``edges`` (arrivals in time order), each
    judged on its own requests from idle workers."""
    times = [a.at for a in arrivals]
    plans = []
    for start, end in itertools.pairwise(edges):
        lo, hi = bisect.bisect_left(times, start), bisect.bisect_left(times, end)
        requests = [
            SimRequest(a.at - start, a.prompt_tokens, a.output_tokens) for a in arrivals[lo:hi]
        ]
        plans.append(plan_interval(requests, start, end, setup, limits, slo, min_decode))
    return plans


def compute_gpu_seconds(plans: Sequence[IntervalPlan]) -> float:
    return sum(p.gpus * (p.end - p.start) for p in plans)
