"""The decode pool to zero and back: up at the first waiting request, down to zero only
after the idle window (hysteresis), and the spec knobs that set both."""

from __future__ import annotations

from collections.abc import Sequence

from tandem.api.v1alpha1 import InferenceClusterSpec, ModelSpec, PoolRole
from tandem.autoscale.config import ScalingConfig, compute_scaling_config
from tandem.autoscale.early import may_wake_from_zero, requests_waiting
from tandem.autoscale.exposition import REQUESTS_WAITING_FOR_WORKER, parse_gauge
from tandem.autoscale.observation import PoolObservation
from tandem.autoscale.policy import (
    PolicyState,
    ScaleDecision,
    decide,
    initial_state,
    keeps_last_worker,
)
from tandem.autoscale.reasons import LimitedBy, ScaleReason

INTERVAL = 5.0
DECODE = ScalingConfig(
    role=PoolRole.DECODE,
    min_replicas=0,
    max_replicas=4,
    interval_seconds=INTERVAL,
    scale_down_stabilization_seconds=30,
    scale_to_zero_idle_seconds=60,
)


def drive(
    config: ScalingConfig, queued: Sequence[int], start: int, state: PolicyState | None = None
) -> list[ScaleDecision]:
    """One decision per interval from t=0 with ``queued[i]`` requests waiting and none
    streaming; the pool follows ``desired`` at once and every worker is ready."""
    current, out = start, []
    state = state or initial_state(0.0, start)
    for i, waiting in enumerate(queued):
        observation = PoolObservation(
            current_replicas=current, ready_replicas=current, queued_requests=waiting
        )
        decision, state = decide(config, observation, state, now=i * INTERVAL)
        out.append(decision)
        current = decision.desired
    return out


def test_the_first_waiting_request_scales_the_decode_pool_up_from_zero_at_once() -> None:
    first = drive(DECODE, [1], start=0)[0]
    assert (first.current, first.desired) == (0, 1)
    assert first.reason is ScaleReason.DEMAND_WHILE_SCALED_TO_ZERO


def test_an_idle_pool_keeps_its_last_worker_for_the_idle_window_then_goes_to_zero() -> None:
    # Idle from t=0: the scale-down window (30 s) alone would empty it at t=30; the
    # idle window (60 s) holds the last worker until t=60.
    decisions = drive(DECODE, [0] * 14, start=1)
    sizes = [d.desired for d in decisions]
    assert sizes[:12] == [1] * 12  # t=0..55
    assert sizes[12:] == [0, 0]  # t=60, 65
    held = decisions[10]  # t=50: past the scale-down window, inside the idle window
    assert held.limited_by is LimitedBy.IDLE_WINDOW
    assert "idle 50s of the 60s" in held.message
    assert decisions[12].reason is ScaleReason.POOL_IDLE


def test_a_request_inside_the_idle_window_restarts_it() -> None:
    # Idle for 50 s, one request at t=50, idle again from t=55: zero at t=115.
    queued = [0] * 10 + [1] + [0] * 14
    sizes = [d.desired for d in drive(DECODE, queued, start=1)]
    assert 0 not in sizes[:23]  # up to t=110: idle for less than 60 s
    assert sizes[23:] == [0, 0]  # t=115, 120


def test_without_an_idle_window_zero_follows_the_scale_down_window() -> None:
    # The prefill pool's behaviour (its zero costs no cold start): unchanged.
    config = ScalingConfig(
        role=PoolRole.DECODE,
        min_replicas=0,
        interval_seconds=INTERVAL,
        scale_down_stabilization_seconds=30,
    )
    sizes = [d.desired for d in drive(config, [0] * 8, start=1)]
    assert sizes[:6] == [1] * 6 and sizes[6:] == [0, 0]


def test_keeps_last_worker() -> None:
    cfg = DECODE
    # Only a pool about to reach zero is held, and only inside the window.
    assert keeps_last_worker(cfg, current=1, desired=0, idle_since=None, now=100.0)
    assert keeps_last_worker(cfg, current=3, desired=0, idle_since=50.0, now=100.0)
    assert not keeps_last_worker(cfg, current=1, desired=0, idle_since=40.0, now=100.0)
    assert not keeps_last_worker(cfg, current=2, desired=1, idle_since=None, now=100.0)
    assert not keeps_last_worker(cfg, current=0, desired=0, idle_since=None, now=100.0)
    # A pool whose maximum is 0 is meant to be empty.
    capped = ScalingConfig(role=PoolRole.DECODE, max_replicas=0, scale_to_zero_idle_seconds=60)
    assert not keeps_last_worker(capped, current=1, desired=0, idle_since=None, now=0.0)


def test_the_idle_window_comes_from_the_decode_spec_only() -> None:
    spec = InferenceClusterSpec.model_validate(
        {
            "model": ModelSpec(name="m").model_dump(),
            "decode": {"minReplicas": 0, "replicas": 0},
            "autoscaling": {"enabled": True, "decode": {"scaleToZeroIdleSeconds": 120}},
        }
    )
    decode = compute_scaling_config(spec, PoolRole.DECODE)
    assert (decode.min_replicas, decode.scale_to_zero_idle_seconds) == (0, 120.0)
    assert compute_scaling_config(spec, PoolRole.PREFILL).scale_to_zero_idle_seconds == 0.0


def test_an_empty_decode_pool_is_woken_between_rounds_by_waiting_requests() -> None:
    assert may_wake_from_zero(0, 4)
    assert not may_wake_from_zero(1, 4)  # a worker is there: the round decides
    assert not may_wake_from_zero(0, 0)  # nothing to grow to
    assert requests_waiting(1.0)
    assert not requests_waiting(0.0)
    assert not requests_waiting(None)  # unknown is no


def test_parse_gauge_reads_the_waiting_requests_of_one_frontend() -> None:
    text = (
        f"# HELP {REQUESTS_WAITING_FOR_WORKER} Requests waiting.\n"
        f"# TYPE {REQUESTS_WAITING_FOR_WORKER} gauge\n"
        f"{REQUESTS_WAITING_FOR_WORKER} 2.0\n"
    )
    assert parse_gauge(text, REQUESTS_WAITING_FOR_WORKER) == 2.0
    assert parse_gauge("", REQUESTS_WAITING_FOR_WORKER) is None  # an older frontend
