"""Frontend scrapes -> the policy's inputs: the router's own exposition, parsed back."""

from __future__ import annotations

from dataclasses import asdict

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tandem.api.v1alpha1 import PoolRole
from tandem.autoscale import LoadSample, PoolCounts, WorkerLoad, compute_observation
from tandem.autoscale.exposition import (
    RouterReading,
    SampleWindow,
    combine_readings,
    combine_worker_loads,
    parse_router_reading,
    parse_worker_loads,
)
from tandem.frontend.metrics import FrontendMetrics
from tandem.router.messages import WorkerView
from tandem.router.metrics import RouterMetrics
from tandem.router.workers import PoolLoad


def exposition(loads: dict[str, PoolLoad], diverted: int = 0) -> str:
    """What a real router's /metrics serves for these pool loads."""
    registry = CollectorRegistry()
    metrics = RouterMetrics(registry)
    metrics.watch(lambda: loads, lambda: 7)
    metrics.diverted_prefill_tokens.inc(diverted)
    metrics.diverted_prompts.inc(diverted // 32_768)
    return generate_latest(registry).decode()


def test_the_routers_series_become_one_sample_per_pool() -> None:
    text = exposition(
        {
            "prefill": PoolLoad(workers=3, healthy=2, queued_requests=4, queued_tokens=98_304),
            "decode": PoolLoad(
                workers=2, healthy=2, queued_requests=1, active_sequences=37, kv_utilization=0.5
            ),
        },
        diverted=32_768,
    )
    reading = parse_router_reading(text, at=12.5)
    prefill, decode = reading.sample(PoolRole.PREFILL), reading.sample(PoolRole.DECODE)
    assert prefill == LoadSample(
        at=12.5,
        queued_requests=4,
        queued_tokens=98_304,
        diverted_prefill_tokens=32_768,
        prompt_tokens_total=0.0,  # the router's counter, nothing admitted yet
        diverted_prompts_total=1.0,
    )
    assert decode == LoadSample(at=12.5, queued_requests=1, active_sequences=37, kv_utilization=0.5)
    assert reading.healthy_workers == {PoolRole.PREFILL: 2, PoolRole.DECODE: 2}


def test_a_scraped_sample_feeds_the_policys_observation() -> None:
    text = exposition({"prefill": PoolLoad(workers=1, healthy=1, queued_tokens=65_536)})
    sample = parse_router_reading(text, at=1.0).sample(PoolRole.PREFILL)
    observation = compute_observation(PoolCounts(current=1, ready=1), sample, None)
    assert (observation.queued_tokens, observation.current_replicas) == (65_536, 1)
    assert observation.prompt_tokens_per_second is None  # one sample: no rate yet


def test_a_pool_the_router_does_not_report_reads_as_idle() -> None:
    reading = parse_router_reading(exposition({}), at=3.0)
    assert reading.sample(PoolRole.PREFILL) == LoadSample(
        at=3.0, prompt_tokens_total=0.0, diverted_prompts_total=0.0
    )


@pytest.mark.parametrize("text", ["<html>bad gateway</html>", "queue depth is high\n"])
def test_what_is_not_an_exposition_is_an_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_router_reading(text, at=0.0)


def test_frontends_combine_gauges_by_max_and_own_work_by_sum() -> None:
    def reading(tokens: int, diverted: int, active: int) -> RouterReading:
        return RouterReading(
            at=0.0,
            samples={
                PoolRole.PREFILL: LoadSample(
                    at=0.0,
                    queued_tokens=tokens,
                    diverted_prefill_tokens=diverted,
                    diverted_prompts_total=diverted / 10,
                ),
                PoolRole.DECODE: LoadSample(at=0.0, active_sequences=active),
            },
            healthy_workers={PoolRole.PREFILL: 2, PoolRole.DECODE: 3},
        )

    both = combine_readings([reading(1000, 10, 5), reading(3000, 20, 4)], at=9.0)
    assert both.sample(PoolRole.PREFILL).queued_tokens == 3000
    assert both.sample(PoolRole.PREFILL).diverted_prefill_tokens == 30
    assert both.sample(PoolRole.PREFILL).diverted_prompts_total == 3.0
    assert both.sample(PoolRole.DECODE).active_sequences == 5
    assert both.healthy_workers[PoolRole.DECODE] == 3
    assert both.at == 9.0


def test_worker_loads_come_from_readyz() -> None:
    views = [
        WorkerView("10.0.0.1:50051", "decode", True, False, "w1", 3, ""),
        WorkerView("10.0.0.2:50051", "decode", False, True, "w2", 0, "draining"),
    ]
    loads = parse_worker_loads({"ready": True, "workers": [asdict(v) for v in views]})
    assert loads["10.0.0.1:50051"].in_flight == 3 and loads["10.0.0.1:50051"].ready
    assert loads["10.0.0.2:50051"].draining and not loads["10.0.0.2:50051"].ready
    with pytest.raises(ValueError):
        parse_worker_loads({"workers": [{"healthy": True}]})
    with pytest.raises(ValueError):
        parse_worker_loads(["not", "an", "object"])


def test_worker_loads_from_several_frontends_add_up() -> None:
    a = {"w": WorkerLoad(key="w", ready=True, active_sequences=2)}
    b = {"w": WorkerLoad(key="w", ready=False, active_sequences=3), "v": WorkerLoad(key="v")}
    merged = combine_worker_loads([a, b])
    assert merged["w"].in_flight == 5 and merged["w"].ready
    assert set(merged) == {"w", "v"}


def test_frontend_counters_stand_in_for_the_rates() -> None:
    registry = CollectorRegistry()
    router = RouterMetrics(registry)
    router.watch(dict, lambda: 0)
    router.prefill_prompt_tokens.inc(4096)
    frontend = FrontendMetrics(registry)
    frontend.prompt_tokens.inc(99_999)  # every prompt, short ones too: not prefill demand
    for seconds, first in ((3.0, 0.5), (5.0, 1.0)):
        frontend.request_seconds.labels("chat").observe(seconds)
        frontend.ttft_seconds.labels("remote").observe(first)
    frontend.request_seconds.labels("models").observe(9.0)  # not a generation
    reading = parse_router_reading(generate_latest(registry).decode(), at=1.0)
    assert reading.sample(PoolRole.PREFILL).prompt_tokens_total == 4096
    decode = reading.sample(PoolRole.DECODE)
    assert decode.requests_total == 2
    assert decode.decode_seconds_sum == pytest.approx(6.5)  # (3 - 0.5) + (5 - 1)
    assert decode.decode_seconds_count == 2
    # Before the first request the histograms are absent: unknown, not zero.
    assert (
        parse_router_reading(exposition({}), at=0.0).sample(PoolRole.DECODE).requests_total is None
    )


def test_the_baseline_is_the_oldest_sample_within_the_horizon() -> None:
    window = SampleWindow(horizon=600.0)
    assert window.baseline() is None
    for at in (0.0, 300.0, 700.0):
        window.add(LoadSample(at=at))
    baseline = window.baseline()
    assert baseline is not None and baseline.at == 300.0
