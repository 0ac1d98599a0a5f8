"""The yardstick: Erlang C, mean pending tokens, needed replicas - checked against the
pool model itself, so the oracle and the simulation agree on what "enough" means."""

from __future__ import annotations

import math

import pytest

from tandem.api.v1alpha1 import PoolRole
from tandem.autoscale.config import ScalingConfig
from tandem_dev.autoscale_sim.oracle import (
    PoolHardware,
    compute_erlang_c,
    compute_mean_pending_prefill_tokens,
    compute_needed_replicas,
)
from tandem_dev.autoscale_sim.pool_model import SimCluster
from tandem_dev.autoscale_sim.traces import (
    CHAT_MIX,
    LoadLevel,
    Phase,
    Stream,
    Trace,
    generate_arrivals,
)

HW = PoolHardware()


@pytest.mark.parametrize(
    ("servers", "load", "expected"),
    [
        (1, 0.5, 0.5),  # M/M/1: P(wait) = utilization
        (2, 1.0, 1 / 3),
        (3, 0.0, 0.0),
        (2, 2.0, 1.0),  # saturated
    ],
)
def test_erlang_c(servers: int, load: float, expected: float) -> None:
    assert compute_erlang_c(servers, load) == pytest.approx(expected)


def test_erlang_c_falls_with_servers() -> None:
    values = [compute_erlang_c(n, 4.0) for n in range(5, 12)]
    assert values == sorted(values, reverse=True)


def _trace(rate: float, seconds: float = 1500) -> Trace:
    return Trace("t", "constant", seconds, (Stream(CHAT_MIX, (Phase(seconds, rate),)),))


def _simulated_pending(rate: float, replicas: int) -> float:
    trace = _trace(rate)
    cluster = SimCluster(HW, {PoolRole.PREFILL: replicas, PoolRole.DECODE: 16})
    cluster.add_arrivals(generate_arrivals(trace, seed=3))
    samples = []
    for k in range(60, 300):  # skip the first 5 minutes
        cluster.run_until(k * 5.0)
        samples.append(cluster.sample(PoolRole.PREFILL).queued_tokens)
    return sum(samples) / len(samples)


@pytest.mark.parametrize(("rate", "replicas"), [(40, 4), (60, 6)])
def test_queueing_formula_matches_the_pool_model(rate: float, replicas: int) -> None:
    load = _trace(rate).load_at(0)
    predicted = compute_mean_pending_prefill_tokens(load, replicas, HW)
    simulated = _simulated_pending(rate, replicas)
    # Allen-Cunneen is an approximation; here it lands within 5%.
    assert simulated == pytest.approx(predicted, rel=0.1)


def test_pending_is_infinite_when_the_pool_cannot_keep_up() -> None:
    load = _trace(60).load_at(0)  # ~186k tokens/s: 4.65 workers' worth
    assert math.isinf(compute_mean_pending_prefill_tokens(load, 4, HW))
    assert math.isfinite(compute_mean_pending_prefill_tokens(load, 5, HW))


@pytest.mark.parametrize("rate_target", [None, 32000.0])
def test_needed_is_the_fewest_replicas_on_target(rate_target: float | None) -> None:
    config = ScalingConfig(
        role=PoolRole.PREFILL,
        max_replicas=32,
        target_prefill_tokens_per_second_per_replica=rate_target,
    )
    load = _trace(60).load_at(0)
    needed = compute_needed_replicas(PoolRole.PREFILL, load, config, HW)
    assert needed >= 5  # never below what keeps up
    if rate_target is not None:
        work = load.prompt_tokens_per_second / rate_target
        assert needed == math.ceil(work / 1.1)


def test_decode_needed_follows_littles_law() -> None:
    config = ScalingConfig(role=PoolRole.DECODE, min_replicas=1, max_replicas=32)
    load = LoadLevel(
        requests_per_second=64,
        mean_prompt_tokens=1000,
        mean_prompt_tokens_squared=1e6,
        mean_output_tokens=250,
        mean_output_times_context=250 * 1250,
    )
    # 64 req/s x 5 s = 320 sequences; 320 / (32 x 1.1) = 9.09 -> 10.
    assert compute_needed_replicas(PoolRole.DECODE, load, config, HW) == 10


def test_no_load_needs_the_floor() -> None:
    config = ScalingConfig(role=PoolRole.DECODE, min_replicas=2, max_replicas=8)
    assert compute_needed_replicas(PoolRole.DECODE, LoadLevel(), config, HW) == 2
