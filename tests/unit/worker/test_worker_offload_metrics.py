"""The KV offload series on a worker's /metrics: every tier listed (0 included) from the
engine's ``OffloadStats``, and onboarded prompt tokens as their own source; a worker
whose engine has no tiers lists none."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from tandem.engines.base import EngineStats
from tandem.kv.offload import OffloadStats, Tier
from tandem.worker.metrics import WorkerMetrics

OFFLOAD = OffloadStats(
    blocks={Tier.HOST: 3, Tier.DISK: 0},
    capacity={Tier.HOST: 8, Tier.DISK: 0},
    offloaded={Tier.HOST: 12, Tier.DISK: 5},
    onboarded={Tier.DISK: 4},
    damaged={Tier.DISK: 1},
    dropped={Tier.DISK: 2},
    disabled=frozenset({Tier.DISK}),
    onboard_seconds={Tier.DISK: 0.032},
)


def registry_of(stats: EngineStats) -> CollectorRegistry:
    registry = CollectorRegistry()
    WorkerMetrics(registry).watch_engine(lambda: stats)
    return registry


def test_offload_series_are_labelled_by_tier() -> None:
    stats = EngineStats(1, 10, 5, 16, prompt_tokens_onboarded=64, offload=OFFLOAD)
    registry = registry_of(stats)

    def value(name: str, tier: str) -> float | None:
        return registry.get_sample_value(f"tandem_worker_kv_offload_{name}", {"tier": tier})

    assert (value("blocks", "host"), value("capacity_blocks", "host")) == (3, 8)
    assert (value("tier_disabled", "host"), value("tier_disabled", "disk")) == (0, 1)
    assert (value("stored_blocks_total", "host"), value("stored_blocks_total", "disk")) == (12, 5)
    assert (value("onboarded_blocks_total", "host"), value("onboarded_blocks_total", "disk")) == (
        0,
        4,
    )
    assert (value("onboard_seconds_total", "host"), value("onboard_seconds_total", "disk")) == (
        0,
        0.032,
    )
    assert value("damaged_blocks_total", "disk") == 1
    assert value("dropped_blocks_total", "disk") == 2
    onboarded = registry.get_sample_value(
        "tandem_worker_prompt_tokens_total", {"source": "offload"}
    )
    assert onboarded == 64


def test_an_engine_without_tiers_lists_no_offload_series() -> None:
    registry = registry_of(EngineStats(1, 10, 5, 16))
    names = {metric.name for metric in registry.collect()}
    assert not any(name.startswith("tandem_worker_kv_offload") for name in names)
    assert (
        registry.get_sample_value("tandem_worker_prompt_tokens_total", {"source": "offload"}) == 0
    )


def test_per_token_costs_are_what_the_router_reads() -> None:
    # 4 disk blocks of 16 tokens back in 32 ms: 0.5 ms a token; 200 prompt tokens
    # computed in 0.1 s: 0.5 ms a token too. The host tier onboarded nothing: no figure.
    stats = EngineStats(
        1, 10, 5, 16, prompt_tokens_computed=200, prefill_seconds=0.1, offload=OFFLOAD
    )
    assert stats.prefill_seconds_per_token == 0.1 / 200
    assert stats.onboard_seconds_per_token == {Tier.DISK: 0.032 / 64}
    assert EngineStats(1, 10, 5, 16).prefill_seconds_per_token == 0.0
    assert EngineStats(1, 10, 5, 16).onboard_seconds_per_token == {}
    seconds = registry_of(stats).get_sample_value("tandem_worker_prefill_seconds_total")
    assert seconds == 0.1
