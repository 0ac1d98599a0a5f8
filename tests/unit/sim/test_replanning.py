"""When the served workload calls for a new plan: hysteresis on synthetic series of
observations (a burst does not re-plan, a lasting shift re-plans once, not again before
the interval), and the workload the new plan is for."""

from __future__ import annotations

import pytest

from tandem.api.v1alpha1 import LengthWeight, ReplanSpec, RequestRateSpec, WorkloadSpec
from tandem.sim.replanning import (
    MIN_REQUESTS,
    ReplanState,
    adopt,
    describe_outside,
    step,
)
from tandem.sim.workload_observation import ObservedLengths

PLANNED = WorkloadSpec(isl=1000, osl=200, requests_per_second=RequestRateSpec(min=0.5, max=2))
POLICY = ReplanSpec(window_seconds=300, min_interval_seconds=1800, tolerance=0.5)


def seen(
    isl: int = 1000, osl: int = 200, rate: float = 1.0, requests: int = 100
) -> ObservedLengths:
    return ObservedLengths(isl, isl * 2, osl, osl * 2, rate, requests, 300.0)


def run(series: list[tuple[float, ObservedLengths | None]], policy: ReplanSpec = POLICY):
    """Step through ``series``; the times at which a re-plan fired, and the last state."""
    state, fired = ReplanState(), []
    for now, observation in series:
        verdict = step(state, policy, PLANNED, observation, now)
        state = verdict.state
        if verdict.replan:
            fired.append(now)
    return fired, state


def test_inside_the_tolerance_is_inside() -> None:
    assert describe_outside(PLANNED, seen(isl=1499, osl=134, rate=2.99), 0.5) is None
    assert describe_outside(PLANNED, seen(isl=1501), 0.5) == (
        "median prompt 1,501 tokens vs 1,000 planned"
    )
    assert describe_outside(PLANNED, seen(osl=133), 0.5) == (
        "median answer 133 tokens vs 200 planned"
    )
    assert describe_outside(PLANNED, seen(rate=3.1), 0.5) == "3.1 req/s vs at most 2 planned"


def test_a_tail_above_the_planned_p90_is_outside_though_the_median_holds() -> None:
    # 1k chat joined by a fifth of 32k prompts: the median stays 1k, the p90 does not.
    planned = PLANNED.model_copy(update={"isl_p90": 1000, "osl_p90": 400})
    mix = ObservedLengths(1000, 32000, 200, 400, 1.0, 100, 300.0)
    assert describe_outside(planned, mix, 0.5) == "p90 prompt 32,000 tokens vs 1,000 planned"
    assert describe_outside(PLANNED, mix, 0.5) is None  # a plan without a p90: medians only
    # A tail that shrinks is the autoscaler's (the prefill pool goes to zero), as is a
    # falling rate.
    calm = planned.model_copy(update={"isl_p90": 32000})
    assert describe_outside(calm, seen(isl=1000), 0.5) is None


def test_a_falling_rate_is_the_autoscalers_not_a_re_plan() -> None:
    assert describe_outside(PLANNED, seen(rate=0.01), 0.5) is None


def test_a_burst_shorter_than_the_window_does_not_re_plan() -> None:
    shifted = seen(isl=32000)
    series = [(t, shifted) for t in range(0, 300, 15)] + [(300.0, seen())]
    series += [(t, shifted) for t in range(315, 600, 15)]  # outside again, from 315
    fired, state = run(series)
    assert fired == []
    assert state.outside_since == 315


def test_a_lasting_shift_re_plans_once_a_window_after_it_began() -> None:
    series = [(0.0, seen())] + [(t, seen(isl=32000)) for t in range(15, 1200, 15)]
    fired, state = run(series)
    assert fired == [315]
    assert (state.replans, state.last_replan_at) == (1, 315)


def test_no_second_re_plan_before_the_interval() -> None:
    # Still outside after the first re-plan (the plan for it has not changed the
    # envelope in this synthetic run): the next one waits out min_interval_seconds.
    series = [(t, seen(isl=32000)) for t in range(0, 3600, 15)]
    fired, _ = run(series)
    assert fired == [300, 300 + 1800]


def test_too_few_requests_say_nothing_either_way() -> None:
    few = seen(isl=32000, requests=MIN_REQUESTS - 1)
    series = [(0.0, seen(isl=32000))] + [(t, few) for t in range(15, 900, 15)]
    series += [(900.0, seen(isl=32000)), (915.0, None)]
    fired, state = run(series)
    # The excursion that began at 0 was never interrupted by evidence: re-plan at 900.
    assert fired == [900]
    assert state.outside_since is None


def test_disabled_reports_but_never_re_plans() -> None:
    series = [(t, seen(isl=32000)) for t in range(0, 4000, 15)]
    fired, state = run(series, POLICY.model_copy(update={"enabled": False}))
    assert fired == []
    assert state.outside_since == 0


def test_the_new_plan_is_for_the_observed_medians_and_a_higher_rate() -> None:
    adopted = adopt(PLANNED, seen(isl=31873, osl=950, rate=2.134))
    assert (adopted.isl, adopted.osl) == (31873, 950)
    assert (adopted.isl_p90, adopted.osl_p90) == (2 * 31873, 2 * 950)  # seen()'s p90s
    assert adopted.requests_per_second.min == 0.5
    assert adopted.requests_per_second.max == pytest.approx(2.2)  # 2.134 up to 2 digits


def test_the_new_plan_draws_from_the_observed_histograms() -> None:
    # A burst of 32k documents among 1k chat: a quarter of the prompts, two bars.
    observed = seen(isl=1000)
    observed = ObservedLengths(
        **{
            **{f: getattr(observed, f) for f in observed.__dataclass_fields__},
            "isl_bars": ((1024, 30.0), (32768, 10.0)),
            "osl_bars": ((64, 40.0),),
        }
    )
    adopted = adopt(PLANNED, observed)
    assert adopted.isl_histogram == [
        LengthWeight(tokens=1024, weight=30), LengthWeight(tokens=32768, weight=10),
    ]  # fmt: skip
    assert adopted.osl_histogram == [LengthWeight(tokens=64, weight=40)]
    assert adopt(PLANNED, seen()).isl_histogram is None  # nothing observed: none


def test_a_lower_observed_rate_keeps_the_planned_range() -> None:
    adopted = adopt(PLANNED, seen(isl=8000, rate=0.7))
    assert adopted.requests_per_second == PLANNED.requests_per_second
    assert adopted.isl == 8000
