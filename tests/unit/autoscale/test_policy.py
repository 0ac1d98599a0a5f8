"""decide(): stabilization, steps, bounds, scale-to-zero, unschedulable, reasons."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from tandem.api.v1alpha1 import PoolRole
from tandem.autoscale.config import ScalingConfig
from tandem.autoscale.observation import PoolObservation
from tandem.autoscale.policy import PolicyState, ScaleDecision, decide, initial_state
from tandem.autoscale.reasons import LimitedBy, LoadSignal, ScaleReason

T = 32768  # queued tokens per replica
BASE = ScalingConfig(
    role=PoolRole.PREFILL,
    min_replicas=0,
    max_replicas=20,
    interval_seconds=5,
    scale_up_stabilization_seconds=0,
    scale_down_stabilization_seconds=30,
    max_step_up=4,
    max_step_down=4,
    tolerance=0.1,
    target_queued_tokens_per_replica=T,
    unschedulable_after_seconds=60,
)


def drive(
    config: ScalingConfig,
    tokens: Sequence[int],
    start: int,
    *,
    rates: Sequence[float] | None = None,
    state: PolicyState | None = None,
    unschedulable: int = 0,
) -> list[ScaleDecision]:
    """One decision per interval from t=0, starting from a freshly seeded state; the
    pool follows ``desired`` at once, except ``unschedulable`` pods that stay pending."""
    current, decisions = start, []
    state = state or initial_state(0.0, start)
    for i, queued in enumerate(tokens):
        observation = PoolObservation(
            current_replicas=current,
            ready_replicas=current - unschedulable,
            starting_replicas=unschedulable,
            unschedulable_replicas=unschedulable,
            queued_tokens=queued,
            prompt_tokens_per_second=rates[i] if rates else None,
        )
        decision, state = decide(config, observation, state, now=i * config.interval_seconds)
        decisions.append(decision)
        current = decision.desired
    return decisions


def desired(decisions: Sequence[ScaleDecision]) -> list[int]:
    return [d.desired for d in decisions]


def test_scales_up_on_token_pressure_in_one_interval() -> None:
    [d] = drive(BASE, [4 * T], start=2)
    assert d.desired == 4
    assert d.reason is ScaleReason.QUEUED_TOKENS_ABOVE_TARGET
    assert d.signal is LoadSignal.QUEUED_TOKENS
    assert d.limited_by is LimitedBy.NONE
    assert d.changed and d.direction == 1


def test_long_prompts_scale_further_than_the_same_count_of_short_ones() -> None:
    long = drive(BASE, [8 * 32768], start=1)
    short = drive(BASE, [8 * 1024], start=1)
    assert long[0].desired == 5  # 8 replicas of work, max step 4
    assert short[0].desired == 1


@pytest.mark.parametrize(
    ("queued", "expected", "reason"),
    [
        (int(4.3 * T), 4, ScaleReason.WITHIN_TOLERANCE),
        (int(3.7 * T), 4, ScaleReason.WITHIN_TOLERANCE),
        (int(4.5 * T), 5, ScaleReason.QUEUED_TOKENS_ABOVE_TARGET),
    ],
)
def test_tolerance_band(queued: int, expected: int, reason: ScaleReason) -> None:
    [d] = drive(BASE, [queued], start=4)
    assert (d.desired, d.reason) == (expected, reason)


def test_scale_down_waits_for_the_whole_window() -> None:
    # 30 s window at 5 s intervals: the six rounds that measured those 30 s (now and
    # five back) must all agree; the busy round at t=0 measured the 5 s before it.
    decisions = drive(BASE, [8 * T] + [2 * T] * 8, start=8)
    assert desired(decisions) == [8, 8, 8, 8, 8, 8, 4, 2, 2]
    assert all(d.reason is ScaleReason.SCALE_DOWN_STABILIZING for d in decisions[1:6])
    assert all(d.limited_by is LimitedBy.STABILIZATION for d in decisions[1:6])
    assert decisions[6].limited_by is LimitedBy.MAX_STEP
    assert decisions[7].reason is ScaleReason.QUEUED_TOKENS_BELOW_TARGET


def test_scale_down_goes_to_the_highest_recommendation_of_the_window() -> None:
    loads = [8 * T, 3 * T, 6 * T, 3 * T, 3 * T, 3 * T, 3 * T, 3 * T, 3 * T]
    assert desired(drive(BASE, loads, start=8)) == [8, 8, 8, 8, 8, 8, 6, 6, 3]


def test_a_one_interval_dip_moves_nothing() -> None:
    loads = [6 * T, 6 * T, 1 * T, 6 * T, 6 * T]
    assert desired(drive(BASE, loads, start=6)) == [6] * 5


def test_scale_up_window_takes_the_smallest_recommendation() -> None:
    config = replace(BASE, scale_up_stabilization_seconds=10)  # two rounds
    spike = drive(config, [2 * T, 9 * T, 2 * T], start=2)
    assert desired(spike) == [2, 2, 2]
    assert spike[1].reason is ScaleReason.SCALE_UP_STABILIZING
    assert spike[1].limited_by is LimitedBy.STABILIZATION
    sustained = drive(config, [2 * T, 6 * T, 6 * T], start=2)
    assert desired(sustained) == [2, 2, 6]


@pytest.mark.parametrize(
    ("step_up", "step_down", "loads", "start", "expected"),
    [
        (4, 4, [20 * T] * 4, 1, [5, 9, 13, 17]),
        (2, 4, [9 * T] * 3, 1, [3, 5, 7]),
        (4, 1, [0] * 10, 3, [3, 3, 3, 3, 3, 3, 2, 1, 0, 0]),
        (4, 2, [0] * 9, 5, [5, 5, 5, 5, 5, 5, 3, 1, 0]),
    ],
)
def test_max_step(
    step_up: int, step_down: int, loads: list[int], start: int, expected: list[int]
) -> None:
    config = replace(BASE, max_step_up=step_up, max_step_down=step_down)
    decisions = drive(config, loads, start=start)
    assert desired(decisions) == expected


def test_a_step_limited_climb_keeps_its_destination_through_a_noisy_interval() -> None:
    # 1 -> wants 6, step-limited to 5; next interval the load reads 5.3 (within 10% of 5)
    # but still above 5: the climb goes on to 6. Had it fallen to 5, the climb stops.
    climbing = drive(BASE, [int(6.5 * T), int(5.3 * T), int(5.3 * T)], start=1)
    assert desired(climbing) == [5, 6, 6]
    stopped = drive(BASE, [int(6.5 * T), 5 * T, 5 * T], start=1)
    assert desired(stopped) == [5, 5, 5]


def test_max_step_is_reported() -> None:
    [d] = drive(BASE, [20 * T], start=1)
    assert d.limited_by is LimitedBy.MAX_STEP
    assert d.recommended == 19  # ceil(20 / 1.1)
    assert "MaxStep" in d.message


@pytest.mark.parametrize(
    ("min_replicas", "max_replicas", "queued", "start", "expected", "limited_by", "reason"),
    [
        (0, 6, 10 * T, 5, 6, LimitedBy.MAX_REPLICAS, ScaleReason.QUEUED_TOKENS_ABOVE_TARGET),
        (0, 6, 10 * T, 6, 6, LimitedBy.MAX_REPLICAS, ScaleReason.AT_MAX_REPLICAS),
        (2, 6, 0, 2, 2, LimitedBy.MIN_REPLICAS, ScaleReason.AT_MIN_REPLICAS),
        # The spec moved the bounds under the pool: corrected at once, steps or not.
        (0, 6, 10 * T, 15, 6, LimitedBy.MAX_REPLICAS, ScaleReason.ABOVE_MAX_REPLICAS),
        (8, 12, 0, 1, 8, LimitedBy.MIN_REPLICAS, ScaleReason.BELOW_MIN_REPLICAS),
    ],
)
def test_bounds(
    min_replicas: int,
    max_replicas: int,
    queued: int,
    start: int,
    expected: int,
    limited_by: LimitedBy,
    reason: ScaleReason,
) -> None:
    config = replace(BASE, min_replicas=min_replicas, max_replicas=max_replicas)
    [d] = drive(config, [queued], start=start)
    assert (d.desired, d.limited_by, d.reason) == (expected, limited_by, reason)


def test_prefill_scales_to_zero_when_idle_and_back_on_demand() -> None:
    decisions = drive(BASE, [0] * 8 + [3 * T, 3 * T], start=2)
    assert desired(decisions) == [2, 2, 2, 2, 2, 2, 0, 0, 3, 3]
    assert decisions[1].reason is ScaleReason.SCALE_DOWN_STABILIZING
    assert decisions[6].reason is ScaleReason.POOL_IDLE
    assert decisions[7].reason is ScaleReason.POOL_IDLE
    assert decisions[8].reason is ScaleReason.DEMAND_WHILE_SCALED_TO_ZERO


def test_one_waiting_request_wakes_a_pool_at_zero() -> None:
    state = PolicyState()
    observation = PoolObservation(current_replicas=0, ready_replicas=0, queued_requests=1)
    decision, _ = decide(BASE, observation, state, now=0)
    assert decision.desired == 1


def test_diverted_prompts_wake_a_pool_at_zero() -> None:
    # The router prefills locally while the pool is empty; that is still demand.
    observation = PoolObservation(
        current_replicas=0, ready_replicas=0, diverted_prefill_tokens=2 * T
    )
    decision, _ = decide(BASE, observation, PolicyState(), now=0)
    assert decision.desired == 2
    assert decision.reason is ScaleReason.DEMAND_WHILE_SCALED_TO_ZERO


def test_decode_keeps_its_floor() -> None:
    config = replace(BASE, role=PoolRole.DECODE, min_replicas=1)
    observation = PoolObservation(current_replicas=3, ready_replicas=3)
    state = PolicyState()
    for i in range(10):
        decision, state = decide(config, observation, state, now=i * 5)
        observation = replace(observation, current_replicas=decision.desired)
    assert decision.desired == 1


RATE = replace(BASE, max_replicas=40, target_prefill_tokens_per_second_per_replica=32000)


class TestUnschedulable:
    # Arrival rates drive these: queue pressure alone never grows a pool with pods
    # pending (they count as starting), see test_recommendation.

    def test_before_the_grace_period_scale_up_continues(self) -> None:
        decisions = drive(RATE, [0] * 3, start=4, rates=[12 * 32000] * 3, unschedulable=2)
        assert desired(decisions) == [8, 11, 11]
        assert all(d.limited_by is not LimitedBy.UNSCHEDULABLE for d in decisions)

    def test_after_the_grace_period_it_holds_and_says_so(self) -> None:
        rates = [4 * 32000] * 12 + [30 * 32000] * 4
        held = drive(RATE, [0] * 16, start=4, rates=rates, unschedulable=2)
        values = desired(held)
        assert values[:12] == [4] * 12
        # t = 60 s: the pods have been pending for the whole grace period.
        assert values[12:] == [4, 4, 4, 4]
        assert held[12].reason is ScaleReason.UNSCHEDULABLE
        assert held[12].limited_by is LimitedBy.UNSCHEDULABLE
        assert held[12].recommended == 28  # ceil(30 / 1.1): what it would have wanted
        assert "pending for capacity" in held[12].message

    def test_a_pool_short_of_pending_pods_is_reported_even_without_more_load(self) -> None:
        rates = [6 * 32000] * 14
        decisions = drive(RATE, [0] * 14, start=6, rates=rates, unschedulable=2)
        assert desired(decisions) == [6] * 14
        assert decisions[11].reason is ScaleReason.WITHIN_TOLERANCE
        assert decisions[12].reason is ScaleReason.UNSCHEDULABLE
        assert decisions[13].limited_by is LimitedBy.UNSCHEDULABLE

    def test_the_grace_period_counts_from_the_first_pending_observation(self) -> None:
        rates = [30 * 32000] * 3
        early = drive(RATE, [0] * 3, start=4, rates=rates, unschedulable=2)
        assert desired(early) == [8, 12, 16]  # only 10 s pending: not yet reported

    def test_scale_down_is_never_held(self) -> None:
        state = PolicyState(unschedulable_since=-1000.0)
        observation = PoolObservation(
            current_replicas=10,
            ready_replicas=6,
            starting_replicas=4,
            unschedulable_replicas=4,
            queued_tokens=2 * T,
        )
        decision, _ = decide(BASE, observation, state, now=0)
        assert decision.desired == 6  # max step down 4
        assert decision.direction == -1

    def test_growth_resumes_once_capacity_appears(self) -> None:
        state = PolicyState(unschedulable_since=-1000.0)
        stuck = PoolObservation(
            current_replicas=6,
            ready_replicas=4,
            starting_replicas=2,
            unschedulable_replicas=2,
            queued_tokens=12 * T,
        )
        held, state = decide(BASE, stuck, state, now=0)
        assert held.desired == 6
        scheduled = replace(stuck, unschedulable_replicas=0, ready_replicas=6, starting_replicas=0)
        resumed, state = decide(BASE, scheduled, state, now=5)
        assert resumed.desired == 10  # ceil(12 / 1.1) = 11, max step 4 from 6
        assert state.unschedulable_since is None


def test_a_restarted_loop_waits_a_window_before_shrinking() -> None:
    fresh = drive(BASE, [0] * 3, start=6, state=initial_state(0.0, 6))
    # initial_state was seeded at t=0, the first decision is also at t=0: still 6.
    assert desired(fresh) == [6, 6, 6]


def test_history_stays_bounded() -> None:
    state = PolicyState()
    observation = PoolObservation(current_replicas=2, ready_replicas=2, queued_tokens=2 * T)
    for i in range(1000):
        _, state = decide(BASE, observation, state, now=i * 5.0)
    assert len(state.recommendations) <= 9  # the 30 s window + slack


def test_jittered_ticks_keep_the_window_to_its_rounds() -> None:
    # Real loops tick a little late; the window must neither lose its oldest round to
    # that nor keep one more.
    state = initial_state(0.0, 8)
    times = [0.0, 5.01, 10.03, 15.02, 20.04, 25.05, 30.07, 35.02]
    loads = [8 * T, 8 * T] + [2 * T] * 6
    held = []
    for now, queued in zip(times, loads, strict=True):
        observation = PoolObservation(current_replicas=8, ready_replicas=8, queued_tokens=queued)
        decision, state = decide(BASE, observation, state, now=now)
        held.append(decision.desired)
    assert held == [8] * 7 + [4]  # the busy round at 5.01 holds through 30.07, not 35.02


def test_rate_target_sizes_prefill_from_arrivals() -> None:
    config = replace(BASE, target_prefill_tokens_per_second_per_replica=32000)
    observation = PoolObservation(
        current_replicas=1, ready_replicas=1, prompt_tokens_per_second=160000
    )
    decision, state = decide(config, observation, PolicyState(), now=0)
    assert decision.desired == 5
    assert decision.reason is ScaleReason.PROMPT_TOKEN_RATE_ABOVE_TARGET
    assert state.prompt_tokens_per_second is not None
    assert state.prompt_tokens_per_second.value == 160000


def test_decode_remembers_the_mean_decode_time_through_a_lull() -> None:
    config = replace(BASE, role=PoolRole.DECODE, min_replicas=1)
    busy = PoolObservation(
        current_replicas=2, ready_replicas=2, requests_per_second=1, mean_decode_seconds=6.0
    )
    _, state = decide(config, busy, PolicyState(), now=0)
    burst = PoolObservation(current_replicas=2, ready_replicas=2, requests_per_second=32)
    decision, state = decide(config, burst, state, now=5)
    assert state.mean_decode_seconds == 6.0
    assert decision.desired == 6  # 32 req/s x 6 s = 192 sequences = 6 replicas at 32


@pytest.mark.parametrize(("smoothing", "rounds"), [(20.0, 9), (5.0, 3)])
def test_shorter_smoothing_follows_a_sustained_small_step_sooner(
    smoothing: float, rounds: int
) -> None:
    # 60k -> 72k tokens/s at 32k per replica: 1.9 -> 2.25 replicas' worth, a step too
    # small to be taken at once (x1.2 < x1.5), so the average carries it to the pool.
    config = replace(
        BASE, target_prefill_tokens_per_second_per_replica=32000, smoothing_seconds=smoothing
    )
    settled, stepped = [60000.0] * 6, [72000.0] * 12
    decisions = drive(config, [0] * 18, 2, rates=[*settled, *stepped])
    assert desired(decisions)[:6] == [2] * 6
    grown = desired(decisions)[6:]
    assert grown.index(3) + 1 == rounds
