"""The SLO oracle on tiny traces solved by hand with the clock: an idle interval, one
request, two requests that one worker cannot serve within the ITL target but two can,
a trace's GPU-seconds, and a target no deployment meets."""

from __future__ import annotations

import pytest

from tandem.engines.simulated import SimulatedEngine
from tandem.sim.cluster import SimRequest
from tandem.sim.metrics import Slo
from tandem.sim.planner import Limits, Setup
from tandem_dev.autoscale_sim.slo_oracle import (
    compute_gpu_seconds,
    enumerate_candidates,
    plan_interval,
    plan_trace,
    plan_windows,
)
from tandem_dev.autoscale_sim.traces import Arrival

OPTIONS = {"model": "gpt-oss-120b", "accelerator": "gb200", "kv_cache_dtype": "fp8"}
SETUP = Setup(OPTIONS, OPTIONS, 2048)  # 1k prompts prefill on their decode worker
LIMITS = Limits(max_prefill=1, max_decode=2, prefill_tp=1, decode_tp=1)
CLOCK = SimulatedEngine.from_options(OPTIONS).config.clock


def test_candidates_go_by_gpus_then_fewer_prefill_workers() -> None:
    assert list(enumerate_candidates(LIMITS, 1)) == [(0, 1), (0, 2), (1, 1), (1, 2)]


def test_an_idle_interval_keeps_the_decode_floor() -> None:
    plan = plan_interval([], 0.0, 10.0, SETUP, LIMITS, Slo(1.0, 0.01))
    assert (plan.prefill, plan.decode, plan.gpus, plan.attainable) == (0, 1, 1, True)


def test_one_request_needs_one_worker() -> None:
    plan = plan_interval([SimRequest(0.0, 1024, 16)], 0.0, 10.0, SETUP, LIMITS, Slo(1.0, 0.01))
    assert (plan.prefill, plan.decode, plan.requests, plan.attainment) == (0, 1, 1, 1.0)


def two_at_once_slo() -> Slo:
    """An ITL target between one sequence's decode step and two sequences' (at the
    context the answers decode at): one worker batching both misses it, two make it."""
    alone = CLOCK.step_seconds([1040], [])
    together = CLOCK.step_seconds([1040, 1040], [])
    assert alone < together
    return Slo(1.0, (alone + together) / 2)


def test_two_requests_one_worker_cannot_batch_within_the_itl_target() -> None:
    requests = [SimRequest(0.0, 1024, 32), SimRequest(0.0, 1024, 32)]
    plan = plan_interval(requests, 0.0, 10.0, SETUP, LIMITS, two_at_once_slo())
    # (0, 1) batches them and misses; (0, 2) is the next smallest and serves each alone
    # (a prefill worker would not help: 1k prompts stay local).
    assert (plan.prefill, plan.decode, plan.gpus, plan.attainment) == (0, 2, 2, 1.0)


def test_a_trace_is_planned_interval_by_interval() -> None:
    arrivals = [Arrival(12.0, 1024, 32), Arrival(12.0, 1024, 32)]
    plans = plan_trace(arrivals, 20.0, 10.0, SETUP, LIMITS, two_at_once_slo())
    assert [(p.start, p.end, p.gpus, p.requests) for p in plans] == [
        (0.0, 10.0, 1, 0),
        (10.0, 20.0, 2, 2),
    ]
    assert compute_gpu_seconds(plans) == pytest.approx(1 * 10 + 2 * 10)


def test_windows_of_any_length_are_planned_on_their_own_requests() -> None:
    arrivals = [Arrival(3.0, 1024, 32), Arrival(12.0, 1024, 32), Arrival(12.0, 1024, 32)]
    plans = plan_windows(arrivals, [0.0, 7.5, 25.0], SETUP, LIMITS, two_at_once_slo())
    assert [(p.start, p.end, p.gpus, p.requests) for p in plans] == [
        (0.0, 7.5, 1, 1),
        (7.5, 25.0, 2, 2),
    ]


def test_a_target_no_deployment_meets_is_unattainable() -> None:
    too_fast = Slo(1.0, CLOCK.step_seconds([1040], []) / 2)
    plan = plan_interval([SimRequest(0.0, 1024, 32)], 0.0, 10.0, SETUP, LIMITS, too_fast)
    assert not plan.attainable and plan.attainment == 0.0
