"""When to plan again from the workload the frontends measure (pure).

A plan is made for one workload (``spec.workload``, or one adopted from observation). The
operator observes the served workload over a sliding window (``workload_observation``)
and calls :func:`step` after each observation. The workload counts as *outside* the plan
when its median prompt or answer length drifts beyond ``1 + tolerance`` times either way,
its p90 prompt or answer length rises above ``1 + tolerance`` times the plan's p90 (where
the plan has one), or its rate rises above ``1 + tolerance`` times the planned maximum.
The p90s matter because a mix keeps its median: 1k chat joined by a fifth of 32k prompts
still has a 1k median, and a plan made for 1k alone has no prefill pool for the 32k ones.
A falling rate or p90 is the autoscaler's to follow (fewer workers, a prefill pool at
zero), not a reason to roll pods. A re-plan is due once the workload has
been outside for a whole window without a break (a burst does not re-plan) and the last
re-plan is at least ``min_interval`` old (rollouts cost capacity while they run). The new
plan is then made for the observed workload (:func:`adopt`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tandem.api.v1alpha1 import LengthWeight, ReplanSpec, RequestRateSpec, WorkloadSpec
from tandem.sim.workload_observation import ObservedLengths

# Fewer requests than this in a window say too little about lengths to re-plan on.
MIN_REQUESTS = 30


@dataclass(frozen=True, slots=True)
class ReplanState:
    outside_since: float | None = None  # seconds (wall clock) the current excursion began
    last_replan_at: float | None = None
    replans: int = 0


@dataclass(frozen=True, slots=True)
class Verdict:
    state: ReplanState
    outside: str | None  # how the observation is outside the planned workload
    replan: bool


def describe_outside(planned: WorkloadSpec, seen: ObservedLengths, tolerance: float) -> str | None:
    """How ``seen`` is outside ``planned`` (e.g. ``median prompt 31,900 tokens vs 1,024
    planned``), or None when it is inside."""
    factor = 1 + tolerance
    found = []
    for what, observed, plan in (
        ("prompt", seen.isl_p50, planned.isl),
        ("answer", seen.osl_p50, planned.osl),
    ):
        if observed > plan * factor or observed * factor < plan:
            found.append(f"median {what} {observed:,} tokens vs {plan:,} planned")
    for what, observed, tail in (
        ("prompt", seen.isl_p90, planned.isl_p90),
        ("answer", seen.osl_p90, planned.osl_p90),
    ):
        if tail is not None and observed > tail * factor:
            found.append(f"p90 {what} {observed:,} tokens vs {tail:,} planned")
    rate_max = planned.requests_per_second.max
    if seen.requests_per_second > rate_max * factor:
        found.append(f"{seen.requests_per_second:.3g} req/s vs at most {rate_max:g} planned")
    return "; ".join(found) or None


def step(
    state: ReplanState,
    policy: ReplanSpec,
    planned: WorkloadSpec,
    seen: ObservedLengths | None,
    now: float,
) -> Verdict:
    """The state after one observation taken at ``now``, and whether to re-plan. Too few
    requests (or none) keep the state as it was: silence is not evidence either way."""
    if seen is None or seen.requests < MIN_REQUESTS:
        return Verdict(state, None, replan=False)
    outside = describe_outside(planned, seen, policy.tolerance)
    if outside is None:
        return Verdict(replace(state, outside_since=None), None, replan=False)
    since = state.outside_since if state.outside_since is not None else now
    state = replace(state, outside_since=since)
    long_enough = now - since >= policy.window_seconds
    rested = state.last_replan_at is None or now - state.last_replan_at >= (
        policy.min_interval_seconds
    )
    if not (policy.enabled and long_enough and rested):
        return Verdict(state, outside, replan=False)
    replanned = ReplanState(outside_since=None, last_replan_at=now, replans=state.replans + 1)
    return Verdict(replanned, outside, replan=True)


def adopt(planned: WorkloadSpec, seen: ObservedLengths) -> WorkloadSpec:
    """The workload the next plan is for: the observed median and p90 lengths and their
    histograms (the planner draws from those: a burst of 32k prompts among 1k chat is two
    bars, which no log-normal through the median and p90 describes); the planned rate
    range, raised to the observed rate (two significant digits, rounded up) when that is
    above it."""
    rate = planned.requests_per_second
    if seen.requests_per_second > rate.max:
        rate = RequestRateSpec(min=rate.min, max=_round_up(seen.requests_per_second))
    isl, osl = max(1, seen.isl_p50), max(1, seen.osl_p50)
    return planned.model_copy(
        update={
            "isl": isl,
            "osl": osl,
            "isl_p90": max(isl, seen.isl_p90),
            "osl_p90": max(osl, seen.osl_p90),
            "isl_histogram": _histogram(seen.isl_bars),
            "osl_histogram": _histogram(seen.osl_bars),
            "requests_per_second": rate,
        }
    )


def _histogram(bars: tuple[tuple[int, float], ...]) -> list[LengthWeight] | None:
    return [LengthWeight(tokens=t, weight=w) for t, w in bars] or None


def _round_up(value: float) -> float:
    """``value`` rounded up to two significant digits (2.134 -> 2.2)."""
    scale = 10 ** (math.floor(math.log10(value)) - 1)
    return float(round(math.ceil(value / scale - 1e-9) * scale, 12))
