"""The live replay's figures, on runs small enough to judge by hand."""

from __future__ import annotations

import dataclasses

import pytest

from tandem.api.v1alpha1 import InferenceCluster, PoolRole, PrefillScalingSpec
from tandem.runtime.scaling_record import TickPool, TickRecord
from tandem.sim.metrics import Slo
from tandem_dev.autoscale_sim.slo_oracle import IntervalPlan
from tandem_dev.autoscale_sim.traces import Phase, RequestShape, Stream, Trace
from tandem_dev.bench.autoscale_live.__main__ import VARIANTS, cluster_name, render_live_cluster
from tandem_dev.bench.autoscale_live.judge import (
    build_ticks,
    compute_live_attainment,
    compute_worker_seconds,
    judge_pool,
)
from tandem_dev.bench.autoscale_live.replay import LiveRun, Served, WorkerSample
from tandem_dev.bench.autoscale_live.report import TraceResult, Variant, render_report
from tandem_dev.bench.autoscale_live.traces import build_live_traces

SLO = Slo(ttft_p90_s=2.0, itl_p90_s=0.006)


def served(arrival: float, ttft: float, itl: float, tokens: int = 11, error: str = "") -> Served:
    first = arrival + ttft
    return Served(arrival, arrival, first, first + itl * (tokens - 1), tokens, 1024, error)


def plan(
    start: float, end: float, prefill: int, decode: int, attainable: bool = True
) -> IntervalPlan:
    return IntervalPlan(start, end, prefill, decode, prefill + decode, 1, 1.0, attainable)


def test_a_request_counts_when_both_its_ttft_and_its_mean_itl_are_within() -> None:
    runs = [
        served(0.0, 1.0, 0.005),  # within
        served(1.0, 2.5, 0.005),  # TTFT over
        served(2.0, 1.0, 0.007),  # ITL over
        served(3.0, 0.5, 0.001, error="APITimeoutError"),  # failed: never within
    ]
    assert compute_live_attainment(runs, SLO) == pytest.approx(0.25)


def test_attainment_where_the_oracle_serves_all_leaves_out_unattainable_intervals() -> None:
    runs = [served(1.0, 1.0, 0.005), served(6.0, 3.0, 0.005), served(7.0, 3.0, 0.005)]
    plans = [plan(0, 5, 1, 1), plan(5, 10, 4, 2, attainable=False)]
    assert compute_live_attainment(runs, SLO, plans) == 1.0
    assert compute_live_attainment(runs, SLO) == pytest.approx(1 / 3)


def test_worker_seconds_hold_each_sample_until_the_next_and_stop_at_the_end() -> None:
    samples = [WorkerSample(0.5, 1, 1), WorkerSample(2.0, 3, 1), WorkerSample(12.0, 0, 2)]
    # prefill: 1 x 1.5 s + 3 x 8 s (the last sample lies past the end)
    assert compute_worker_seconds(samples, PoolRole.PREFILL, 10.0) == pytest.approx(25.5)
    assert compute_worker_seconds(samples, PoolRole.DECODE, 10.0) == pytest.approx(9.5)
    assert compute_worker_seconds([], PoolRole.DECODE, 10.0) == 0.0


def tick(number: int, at: float, desired: int, ready: int = 1) -> TickRecord:
    pool = TickPool(current=desired, ready=ready, desired=desired, queued_tokens=0,
                    queued_requests=0, diverted_tokens=0, active_sequences=0)  # fmt: skip
    return TickRecord(number, at, {"prefill": pool, "decode": pool})


def test_rounds_take_the_need_of_their_stretch_and_count_reaction_in_rounds() -> None:
    trace = Trace("t", "", 20.0, (Stream((RequestShape(1, 1),), (Phase(10, 1), Phase(10, 5))),))
    stretches = [plan(0, 10, 1, 1), plan(10, 20, 3, 1)]
    wall = 1000.0
    records = [tick(n, wall + at, d) for n, (at, d) in enumerate(
        [(-5, 1), (2.5, 1), (7.5, 1), (12.5, 1), (17.5, 3), (25, 0)])]  # fmt: skip
    ticks = build_ticks(records, PoolRole.PREFILL, wall, stretches, trace.duration_seconds)
    assert [(t.at, t.desired, t.needed) for t in ticks] == [
        (2.5, 1, 1), (7.5, 1, 1), (12.5, 1, 3), (17.5, 3, 3)
    ]  # fmt: skip
    verdict = judge_pool(
        PoolRole.PREFILL, trace, ticks, [WorkerSample(0, 1, 1)], stretches, settle_s=5.0
    )
    assert verdict.reactions == (2,)  # the second round after the rise
    assert verdict.flaps_per_30 is None  # no stretch of 30 rounds
    assert (verdict.worker_seconds, verdict.oracle_worker_seconds) == (20.0, 40.0)
    assert (verdict.peak_desired, verdict.peak_needed) == (3, 3)


def test_the_live_traces_scale_their_rates_and_keep_their_length() -> None:
    base, doubled = build_live_traces(1.0, 240.0), build_live_traces(2.0, 240.0)
    assert [t.name for t in base] == ["steady", "bursty", "ramp", "32k-burst"]
    for one, two in zip(base, doubled, strict=True):
        assert one.duration_seconds == two.duration_seconds == 240.0
        for t in (0.0, 30.0, 100.0, 200.0):
            assert two.load_at(t).requests_per_second == pytest.approx(
                2 * one.load_at(t).requests_per_second
            )
    ramp = base[2]
    rates = [ramp.load_at(t).requests_per_second for t in range(0, 240, 20)]
    assert rates == [1, 2, 3, 4, 5, 6, 6, 5, 4, 3, 2, 1]


def result(served_runs: list[Served], live_prefill: int, reactions: tuple[int | None, ...],
           flaps: int | None) -> TraceResult:  # fmt: skip
    trace = Trace("t", "", 10.0, (Stream((RequestShape(1, 1),), (Phase(10, 1),)),))
    run = LiveRun(served=served_runs, samples=[WorkerSample(0.0, live_prefill, 1)])
    plans = [plan(0, 10, 1, 1)]
    verdicts = {
        role: judge_pool(role, trace, [], run.samples, plans, settle_s=0.0) for role in PoolRole
    }
    verdicts[PoolRole.PREFILL] = dataclasses.replace(
        verdicts[PoolRole.PREFILL], reactions=reactions, flaps_per_30=flaps
    )
    return TraceResult(trace, Variant("v", 0, 0.8), run, plans, verdicts)


def test_a_run_meets_the_targets_or_says_which_it_missed() -> None:
    good = [served(t, 1.0, 0.005) for t in range(20)]
    assert result(good, 1, (1, 2), 1).missed() == []
    bad = [*good[:18], served(18, 3.0, 0.005), served(19, 1.0, 0.009)]
    # 18/20 within; 2 prefill + 1 decode worker against 1 + 1: 1.5x; one slow reaction.
    assert result(bad, 2, (3, 1), 2).missed() == [
        "attainment 90%", "GPU-s", "reaction 1/2 > 2", "flaps"
    ]  # fmt: skip


def test_every_trace_and_policy_is_a_valid_cluster_of_its_own() -> None:
    names = set()
    for variant in VARIANTS:
        for trace in build_live_traces():
            document = render_live_cluster(cluster_name(trace, variant), variant)
            cluster = InferenceCluster.model_validate(document)
            names.add(cluster.metadata.name)
            prefill = cluster.spec.prefill
            assert (prefill.min_replicas, prefill.max_replicas) == (variant.prefill_floor, 4)
            assert cluster.spec.autoscaling.enabled
            behavior, defaults = cluster.spec.autoscaling.prefill, PrefillScalingSpec()
            assert behavior.smoothing_seconds == (
                variant.prefill_smoothing_seconds or defaults.smoothing_seconds
            )
            assert behavior.scale_down_stabilization_seconds == (
                variant.prefill_scale_down_seconds or defaults.scale_down_stabilization_seconds
            )
            disaggregation = cluster.spec.frontend.disaggregation
            assert disaggregation.max_prefill_start_wait_seconds == (
                variant.max_prefill_start_wait_seconds
            )
    assert len(names) == len(VARIANTS) * len(build_live_traces())


def test_the_report_gives_each_run_a_verdict_row_and_a_why_row() -> None:
    one = result([served(t, 1.0, 0.005) for t in range(20)], 2, (3,), None)
    one.run.decisions = {"long_prompt": 12.0, "prefill_saturated": 5.0, "decode_busy": 3.0}
    one.run.start_waits = {"remote": 4.0, "local": 1.0}
    one.run.ticks = {i: TickRecord(i, float(i), {}, early=i in (2, 5)) for i in range(1, 7)}
    text = render_report([one], {"v": 87_666}, 1.0)
    verdict, why = (line for line in text.splitlines() if line.startswith("| v | t |"))
    assert "30 vs 20 (1.50x)" in verdict and "missed: GPU-s, reaction 1/1 > 2" in verdict
    # None over; 5 diverted while saturated, 3 queued instead; 4 waited for a starting
    # worker and got it, 1 prefilled locally after waiting; 6 rounds, 2 of them early.
    assert "| 0 / 0 / 0 | 0, 0, 5 | 3 | 4, 1 | 6 (2) |" in why
    assert "targetTokensPerSecondPerReplica 87,666" in text
