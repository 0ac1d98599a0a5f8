"""Load -> replicas: token weighting, decode signals, the tolerance band, rate smoothing."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Any

import pytest

from tandem.api.v1alpha1 import PoolRole
from tandem.autoscale.config import ScalingConfig
from tandem.autoscale.observation import PoolObservation
from tandem.autoscale.reasons import LoadSignal
from tandem.autoscale.recommendation import (
    SignalEstimate,
    compute_raw_replicas,
    compute_recommendation,
    compute_smoothed_signal,
)

PREFILL = ScalingConfig(role=PoolRole.PREFILL, target_queued_tokens_per_replica=32768)
PREFILL_RATE = ScalingConfig(
    role=PoolRole.PREFILL,
    target_queued_tokens_per_replica=32768,
    target_prefill_tokens_per_second_per_replica=32000,
    backlog_drain_seconds=100,
)
DECODE = ScalingConfig(
    role=PoolRole.DECODE, target_active_sequences_per_replica=32, target_kv_utilization=0.8
)


def _obs(**fields: Any) -> PoolObservation:
    """Two ready replicas and the given load."""
    return replace(PoolObservation(current_replicas=2, ready_replicas=2), **fields)


@pytest.mark.parametrize(
    ("config", "observation", "raw", "signal"),
    [
        # Queue-only prefill: pending tokens over the target, prompts weighed by tokens.
        (PREFILL, _obs(queued_tokens=4 * 32768), 4.0, LoadSignal.QUEUED_TOKENS),
        (PREFILL, _obs(queued_tokens=4 * 1024), 0.125, LoadSignal.QUEUED_TOKENS),
        # Diverted tokens are prefill demand too.
        (
            PREFILL,
            _obs(queued_tokens=32768, diverted_prefill_tokens=65536),
            3.0,
            LoadSignal.QUEUED_TOKENS,
        ),
        (PREFILL, _obs(), 0.0, LoadSignal.IDLE),
        # With a rate target: arrivals plus backlog over the drain horizon.
        (
            PREFILL_RATE,
            _obs(prompt_tokens_per_second=96000, queued_tokens=320000),
            (96000 + 3200) / 32000,
            LoadSignal.PROMPT_TOKEN_RATE,
        ),
        # Decode: the largest of sequences (with queue), Little's law and KV.
        (DECODE, _obs(active_sequences=64, queued_requests=32), 3.0, LoadSignal.ACTIVE_SEQUENCES),
        (
            DECODE,
            _obs(active_sequences=10, requests_per_second=20, mean_decode_seconds=8),
            5.0,
            LoadSignal.ACTIVE_SEQUENCES,
        ),
        (
            DECODE,
            _obs(active_sequences=10, ready_replicas=4, kv_utilization=0.9),
            4.5,
            LoadSignal.KV_UTILIZATION,
        ),
        (DECODE, _obs(), 0.0, LoadSignal.IDLE),
    ],
)
def test_raw_replicas(
    config: ScalingConfig, observation: PoolObservation, raw: float, signal: LoadSignal
) -> None:
    got, got_signal = compute_raw_replicas(config, observation)
    assert got == pytest.approx(raw)
    assert got_signal is signal


def test_a_32k_prompt_weighs_32_times_a_1k_prompt() -> None:
    long, _ = compute_raw_replicas(PREFILL, _obs(queued_tokens=32768, queued_requests=1))
    short, _ = compute_raw_replicas(PREFILL, _obs(queued_tokens=1024, queued_requests=1))
    assert long == pytest.approx(32 * short)


def test_requests_without_token_counts_still_ask_for_a_worker() -> None:
    raw, signal = compute_raw_replicas(PREFILL, _obs(current_replicas=0, queued_requests=3))
    assert raw > 0
    assert compute_recommendation(raw, 0, 0.1) == 1
    assert signal is LoadSignal.QUEUED_TOKENS


@pytest.mark.parametrize("config", [PREFILL, PREFILL_RATE])
def test_queue_pressure_cannot_push_past_the_current_size_while_workers_start(
    config: ScalingConfig,
) -> None:
    rate = 32000.0 if config.target_prefill_tokens_per_second_per_replica else None
    starting = _obs(
        current_replicas=4,
        ready_replicas=1,
        starting_replicas=3,
        queued_tokens=1000 * 32768,
        prompt_tokens_per_second=rate,
    )
    settled = replace(starting, starting_replicas=0, ready_replicas=4)
    held, _ = compute_raw_replicas(config, starting)
    free, _ = compute_raw_replicas(config, settled)
    assert held == pytest.approx(4.0)
    assert free > 4.0


def test_arrival_rate_is_not_capped_while_workers_start() -> None:
    observation = _obs(
        current_replicas=2, ready_replicas=1, starting_replicas=1, prompt_tokens_per_second=256000
    )
    raw, _ = compute_raw_replicas(PREFILL_RATE, observation)
    assert raw == pytest.approx(8.0)


def test_decode_queue_is_capped_while_starting_but_active_sequences_are_not() -> None:
    observation = _obs(
        current_replicas=3,
        ready_replicas=2,
        starting_replicas=1,
        active_sequences=160,
        queued_requests=400,
    )
    raw, _ = compute_raw_replicas(DECODE, observation)
    assert raw == pytest.approx(5.0)  # 160 / 32; the queue alone would say 17.5


@pytest.mark.parametrize(
    ("raw", "current", "expected"),
    [
        (0.0, 3, 0),  # no load at all
        (0.3, 0, 1),  # any load wakes a pool at zero
        (5.0, 0, 5),  # from zero: straight to the tolerance edge ceil(5 / 1.1)
        (4.3, 4, 4),  # within +10%: stay
        (4.5, 4, 5),  # beyond +10%: up
        (9.0, 4, 9),  # up to the fewest replicas within tolerance: ceil(9 / 1.1) = 9
        (10.5, 4, 10),  # ceil(10.5 / 1.1) = 10
        (3.7, 4, 4),  # within -10%: stay
        (3.5, 4, 4),  # below -10% but ceil(3.5) = 4: nothing to remove
        (2.5, 4, 3),  # down to ceil(raw), never to the tolerance edge
        (0.2, 4, 1),
        (19.0, 20, 20),  # 5% below at 20 replicas: within tolerance
        (17.5, 20, 18),
    ],
)
def test_tolerance_band(raw: float, current: int, expected: int) -> None:
    assert compute_recommendation(raw, current, 0.1) == expected


def test_no_tolerance_follows_the_ceiling() -> None:
    for raw in (0.5, 1.0, 1.01, 3.99, 7.2):
        assert compute_recommendation(raw, 4, 0.0) == math.ceil(raw)


INTERVAL = 5.0
SMOOTH = ScalingConfig(
    role=PoolRole.PREFILL, interval_seconds=INTERVAL, smoothing_seconds=30, jump=0.5
)
WEIGHT = 1 - math.exp(-5 / 30)


def step(latest: float | None, estimate: SignalEstimate | None) -> SignalEstimate | None:
    """The estimate after one more interval's sample."""
    return compute_smoothed_signal(latest, estimate, SMOOTH, elapsed_seconds=INTERVAL)


def _estimate(value: float, last: float | None = None) -> SignalEstimate:
    """A long-settled estimate (many samples since its last step) whose last sample was
    ``last``: a run of one when that lies beyond the band."""
    if last is None or abs(math.log(last / value)) <= math.log1p(SMOOTH.jump):
        return SignalEstimate(value, value if last is None else last, samples=100)
    return SignalEstimate(value, last, samples=100, run=1, run_sum=last, run_base=value)


@pytest.mark.parametrize(
    ("latest", "estimate", "expected"),
    [
        (None, None, None),
        (None, _estimate(100.0), 100.0),  # counter reset: keep the estimate
        (120.0, None, 120.0),  # first sample
        (210.0, _estimate(100.0), 210.0),  # more than double: a burst starts
        (0.0, _estimate(100.0), 0.0),  # a burst ends
        (5.0, _estimate(0.0), 5.0),  # anything after silence
        (160.0, _estimate(100.0, last=170.0), 165.0),  # +50%..100% twice: a step to the mean
        (60.0, _estimate(100.0, last=62.0), 61.0),  # below 1/1.5 twice
        (45.0, _estimate(100.0), 45.0),  # below half: at once
        (160.0, _estimate(100.0), 100 + WEIGHT * 60),  # once: could be noise
        (160.0, _estimate(100.0, last=40.0), 100 + WEIGHT * 60),  # opposite directions
        (120.0, _estimate(100.0, last=120.0), 100 + WEIGHT * 20),  # noise: averaged
    ],
)
def test_smoothed_signal(
    latest: float | None, estimate: SignalEstimate | None, expected: float | None
) -> None:
    got = step(latest, estimate)
    if expected is None:
        assert got is None
    else:
        assert got is not None
        assert got.value == pytest.approx(expected)
        if latest is not None:
            assert got.last_sample == latest


def test_a_sample_taken_sooner_weighs_less() -> None:
    # Averaged in after 1 s instead of the 5 s interval: 1 - e^(-1/30) of the way.
    sooner = compute_smoothed_signal(
        120.0, _estimate(100.0, last=120.0), SMOOTH, elapsed_seconds=1.0
    )
    assert sooner is not None
    assert sooner.value == pytest.approx(100 + (1 - math.exp(-1 / 30)) * 20)


def test_noise_around_a_level_stays_near_it() -> None:
    estimate: SignalEstimate | None = _estimate(100.0)
    for sample in [130.0, 80.0, 120.0, 70.0, 125.0, 90.0, 110.0, 75.0] * 5:
        estimate = step(sample, estimate)
        assert estimate is not None
        assert 90 < estimate.value < 110


def test_a_new_level_is_averaged_evenly_at_first() -> None:
    estimate = step(300.0, _estimate(100.0))  # a step: x3
    assert estimate == SignalEstimate(300.0, 300.0, 1)
    estimate = step(260.0, estimate)
    assert estimate is not None
    assert estimate.value == pytest.approx(280.0)  # the mean of two, not 300 + 17% of -40
    estimate = step(280.0, estimate)
    assert estimate is not None
    assert estimate.value == pytest.approx(280.0)
    assert estimate.samples == 3


def counted(
    latest: float, estimate: SignalEstimate | None, counts_per_unit: float = 1.0
) -> SignalEstimate:
    """The estimate after one more interval's sample of a signal that counts."""
    got = compute_smoothed_signal(
        latest, estimate, SMOOTH, elapsed_seconds=INTERVAL, counts_per_unit=counts_per_unit
    )
    assert got is not None
    return got


@pytest.mark.parametrize(
    ("latest", "level", "counts_per_unit", "stepped"),
    [
        # 3 sigma of the difference of two counts: |a - b| > 3 sqrt(a + b).
        (5.0, 0.85, 1.0, False),  # 4.15 < 7.3: Poisson(0.85) shows a 5 now and then
        (3.0, 0.85, 1.0, False),  # "2 active + 1 queued" at 0.85 on average
        (30.0, 10.0, 1.0, True),  # 20 > 18.97: ten sequences tripled
        (25.0, 10.0, 1.0, False),  # 15 < 17.7: x2.5 of ten may still be noise
        (0.0, 20.0, 1.0, True),  # twenty sequences gone at once
        (0.0, 5.0, 1.0, False),  # five gone: maybe a lull
        (10.0, 3.3, 5.0, True),  # requests/s over 5 s: 16.5 -> 50 requests
        (10.0, 3.3, 1.0, False),  # the same rate over 1 s: 3.3 -> 10 requests
    ],
)
def test_a_step_of_a_count_must_stand_out_from_counting_noise(
    latest: float, level: float, counts_per_unit: float, stepped: bool
) -> None:
    got = counted(latest, _estimate(level), counts_per_unit)
    assert (got.value == latest) is stepped
    if not stepped:
        assert got.value == pytest.approx(level + WEIGHT * (latest - level))


@pytest.mark.parametrize(
    ("level", "empty_samples"),
    [
        (2.0, 5),  # k empty samples stand out from Poisson(2) once 2 k > 9
        (0.85, 6),  # never before 11, but 30 s (the smoothing time) of nothing is zero
        (20.0, 1),  # twenty gone at once
    ],
)
def test_a_run_of_empty_samples_steps_to_zero_once_it_is_evidence(
    level: float, empty_samples: int
) -> None:
    estimate = _estimate(level)
    for sample in range(1, empty_samples + 1):
        estimate = counted(0.0, estimate)
        assert (estimate.value == 0.0) is (sample == empty_samples), sample


def test_a_run_is_broken_by_a_sample_back_inside_the_band() -> None:
    estimate = _estimate(2.0)
    for _ in range(4):
        estimate = counted(0.0, estimate)
    estimate = counted(2.0, estimate)  # the evidence starts over
    estimate = counted(0.0, estimate)
    assert estimate.value > 0


def test_a_sustained_rise_of_a_count_steps_to_its_mean() -> None:
    # 10 -> 20 (x2, 10 < 3 sqrt(30)): noise once; twice (40 vs 20: 20 < 3 sqrt(60))
    # still; three times 60 vs 30: 30 > 3 sqrt(90) = 28.5.
    estimate = _estimate(10.0)
    for _ in range(2):
        estimate = counted(20.0, estimate)
        assert estimate.value < 20
    estimate = counted(20.0, estimate)
    assert estimate == SignalEstimate(20.0, 20.0, 3)


def _poisson(rng: random.Random, mean: float) -> int:
    """Knuth's method: exact for the small means these tests use."""
    limit, count, product = math.exp(-mean), 0, rng.random()
    while product >= limit:
        count, product = count + 1, product * rng.random()
    return count


def test_counting_noise_at_small_counts_is_not_followed() -> None:
    # What scaled steady chat up: ~0.85 active sequences against a target of 2. Counted,
    # the estimate stays near the mean; taken as a plain signal it leaps to each 4 or 5.
    rng = random.Random(7)
    samples = [float(_poisson(rng, 0.85)) for _ in range(2000)]
    counted_estimate: SignalEstimate | None = None
    plain_estimate: SignalEstimate | None = None
    counted_peak = plain_peak = 0.0
    for index, sample in enumerate(samples):
        counted_estimate = counted(sample, counted_estimate)
        plain_estimate = step(sample, plain_estimate)
        assert plain_estimate is not None
        if index >= 20:
            counted_peak = max(counted_peak, counted_estimate.value)
            plain_peak = max(plain_peak, plain_estimate.value)
    assert counted_peak < 2.5 < 4 <= plain_peak
