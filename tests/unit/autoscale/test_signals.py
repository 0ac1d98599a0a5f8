"""Metric samples -> observation: rates, counter resets, the decode-time baseline."""

from __future__ import annotations

import pytest

from tandem.autoscale.signals import (
    LoadSample,
    PoolCounts,
    compute_counter_delta,
    compute_observation,
    compute_rate,
)

COUNTS = PoolCounts(current=5, ready=3, starting=2, unschedulable=1)


@pytest.mark.parametrize(
    ("latest", "previous", "expected"),
    [(10.0, 4.0, 6.0), (4.0, 4.0, 0.0), (3.0, 4.0, None), (None, 4.0, None), (4.0, None, None)],
)
def test_counter_delta(
    latest: float | None, previous: float | None, expected: float | None
) -> None:
    assert compute_counter_delta(latest, previous) == expected


def test_rate_over_the_time_between_samples() -> None:
    before = LoadSample(at=100.0, prompt_tokens_total=1000.0)
    after = LoadSample(at=105.0, prompt_tokens_total=161000.0)
    assert compute_rate(after, before, "prompt_tokens_total") == pytest.approx(32000.0)
    assert compute_rate(after, None, "prompt_tokens_total") is None
    assert compute_rate(before, after, "prompt_tokens_total") is None  # time went backwards


def test_observation_carries_gauges_and_rates() -> None:
    before = LoadSample(at=0.0, prompt_tokens_total=0.0, requests_total=0.0)
    after = LoadSample(
        at=5.0,
        queued_requests=3,
        queued_tokens=70000,
        diverted_prefill_tokens=1000,
        active_sequences=40,
        kv_utilization=0.5,
        prompt_tokens_total=100000.0,
        requests_total=50.0,
    )
    o = compute_observation(COUNTS, after, before)
    assert (o.current_replicas, o.ready_replicas) == (5, 3)
    assert (o.starting_replicas, o.unschedulable_replicas) == (2, 1)
    assert (o.queued_requests, o.queued_tokens, o.diverted_prefill_tokens) == (3, 70000, 1000)
    assert (o.active_sequences, o.kv_utilization) == (40, 0.5)
    assert o.prompt_tokens_per_second == pytest.approx(20000.0)
    assert o.requests_per_second == pytest.approx(10.0)


def test_a_frontend_restart_gives_no_rate_instead_of_a_wrong_one() -> None:
    before = LoadSample(at=0.0, prompt_tokens_total=5e9)
    after = LoadSample(at=5.0, prompt_tokens_total=1000.0)
    assert compute_observation(COUNTS, after, before).prompt_tokens_per_second is None


def test_mean_decode_time_uses_the_baseline_when_given() -> None:
    old = LoadSample(at=0.0, decode_seconds_sum=0.0, decode_seconds_count=0.0)
    previous = LoadSample(at=595.0, decode_seconds_sum=5000.0, decode_seconds_count=1000.0)
    latest = LoadSample(at=600.0, decode_seconds_sum=5010.0, decode_seconds_count=1005.0)
    # Last interval only: five short sequences finished (2 s each).
    short = compute_observation(COUNTS, latest, previous)
    assert short.mean_decode_seconds == pytest.approx(2.0)
    # Over ten minutes: the real mean.
    long = compute_observation(COUNTS, latest, previous, decode_baseline=old)
    assert long.mean_decode_seconds == pytest.approx(5010 / 1005)


def test_no_finished_sequences_means_no_decode_time() -> None:
    sample = LoadSample(at=5.0, decode_seconds_sum=10.0, decode_seconds_count=2.0)
    same = LoadSample(at=10.0, decode_seconds_sum=10.0, decode_seconds_count=2.0)
    assert compute_observation(COUNTS, same, sample).mean_decode_seconds is None
