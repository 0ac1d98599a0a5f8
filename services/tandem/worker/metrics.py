"""The worker's Prometheus series.

Load gauges are read from the service at scrape time (one source of truth with the
Stats RPC). Labels are bounded: ``rpc`` (prefill|decode), ``outcome`` (ok, cancelled or
a gRPC status name in lower case), ``backend`` (nixl|tcp).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from tandem.engines.base import EngineStats
from tandem.kv.offload.stats import OffloadStats
from tandem.kv.offload.tiers import TIERS
from tandem.worker.types import WorkerStats

TRANSFER_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
PREFILL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

_GAUGES: tuple[tuple[str, str, Callable[[WorkerStats], int]], ...] = (
    ("queued_requests", "Requests waiting for prefill or a KV pull.", lambda s: s.queued_requests),
    (
        "queued_prefill_tokens",
        "Prompt tokens of requests waiting for prefill.",
        lambda s: s.queued_prefill_tokens,
    ),
    ("active_sequences", "Sequences decoding.", lambda s: s.active_sequences),
    ("kv_blocks_total", "KV cache blocks in the pool.", lambda s: s.kv_blocks_total),
    ("kv_blocks_free", "Free KV cache blocks.", lambda s: s.kv_blocks_free),
    (
        "kv_held_for_transfer",
        "Prefilled sequences whose KV waits for a decode worker to pull it.",
        lambda s: s.held_for_transfer,
    ),
)


class _LoadCollector(Collector):
    def __init__(self, stats: Callable[[], WorkerStats]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[GaugeMetricFamily]:
        stats = self._stats()
        for name, doc, read in _GAUGES:
            yield GaugeMetricFamily(f"tandem_worker_{name}", doc, value=read(stats))


class _EngineCollector(Collector):
    """Counters the engine keeps itself (the reference engine's prefix cache)."""

    def __init__(self, stats: Callable[[], EngineStats]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        stats = self._stats()
        prompt = CounterMetricFamily(
            "tandem_worker_prompt_tokens",
            "Prompt tokens prefilled here, by source (cache: reused from the prefix "
            "cache; offload: brought back from the KV offload tiers; computed: run "
            "through the model).",
            labels=["source"],
        )
        prompt.add_metric(["cache"], stats.prompt_tokens_cached)
        prompt.add_metric(["offload"], stats.prompt_tokens_onboarded)
        prompt.add_metric(["computed"], stats.prompt_tokens_computed)
        yield prompt
        yield CounterMetricFamily(
            "tandem_worker_prefill_seconds",
            "Seconds spent computing the prompt tokens counted as computed (a step's "
            "time shared among the tokens it computed; the simulated engine's modelled).",
            value=stats.prefill_seconds,
        )
        yield GaugeMetricFamily(
            "tandem_worker_kv_blocks_cached",
            "Full KV blocks the engine's prefix cache holds (what its KV events report).",
            value=stats.kv_blocks_cached,
        )
        if stats.offload is not None:
            yield from _offload_families(stats.offload)


# (name, help, kind, read) per series of the KV offload tiers, each labelled by tier. A
# block is one prefix-cache block: the same tokens in every layer.
_OFFLOAD_SERIES: tuple[
    tuple[str, str, type[CounterMetricFamily | GaugeMetricFamily], Callable[..., float]], ...
] = (
    ("blocks", "KV blocks the tier holds.", GaugeMetricFamily, lambda s, t: s.blocks[t]),
    (
        "capacity_blocks",
        "KV blocks the tier can hold (0 once disabled).",
        GaugeMetricFamily,
        lambda s, t: s.capacity[t],
    ),
    (
        "tier_disabled",
        "1 once the tier was given up after an I/O failure (a full disk).",
        GaugeMetricFamily,
        lambda s, t: int(t in s.disabled),
    ),
    (
        "stored_blocks",
        "KV blocks that entered the tier (from the device pool or the tier above).",
        CounterMetricFamily,
        lambda s, t: s.offloaded.get(t, 0),
    ),
    (
        "onboarded_blocks",
        "KV blocks brought back from the tier into the device pool on a prefix hit.",
        CounterMetricFamily,
        lambda s, t: s.onboarded.get(t, 0),
    ),
    (
        "onboard_seconds",
        "Seconds the onboarded blocks took to come back from the tier (digest checks "
        "included; the simulated engine's modelled).",
        CounterMetricFamily,
        lambda s, t: s.onboard_seconds.get(t, 0.0),
    ),
    (
        "damaged_blocks",
        "KV blocks that came back torn, stale or corrupted, and were recomputed.",
        CounterMetricFamily,
        lambda s, t: s.damaged.get(t, 0),
    ),
    (
        "dropped_blocks",
        "KV blocks dropped from the tier to make room (or with a disabled tier).",
        CounterMetricFamily,
        lambda s, t: s.dropped.get(t, 0),
    ),
)


def _offload_families(
    stats: OffloadStats,
) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
    for name, doc, kind, read in _OFFLOAD_SERIES:
        family = kind(f"tandem_worker_kv_offload_{name}", doc, labels=["tier"])
        for tier in TIERS:
            family.add_metric([tier.value], read(stats, tier))
        yield family


CLAIM_OUTCOMES = ("granted", "gone", "wrong_incarnation")
REFUSAL_REASONS = ("config_mismatch",)
# What only workers may use: the gRPC methods of the KV path, and the TCP KV port.
WORKER_ONLY_CALLS = ("ClaimKv", "KvAgent", "kv_tcp")


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "tandem_worker_requests_total",
            "Prefill and Decode RPCs answered, by outcome.",
            ["rpc", "outcome"],
            registry=registry,
        )
        self.prefill_seconds = Histogram(
            "tandem_worker_prefill_duration_seconds",
            "Engine time of one prefill.",
            buckets=PREFILL_BUCKETS,
            registry=registry,
        )
        self.kv_transfer_bytes = Counter(
            "tandem_worker_kv_transfer_bytes_total",
            "KV bytes pulled from prefill workers.",
            ["backend"],
            registry=registry,
        )
        self.kv_transfer_seconds = Histogram(
            "tandem_worker_kv_transfer_duration_seconds",
            "Duration of one KV pull (handshake excluded).",
            ["backend"],
            buckets=TRANSFER_BUCKETS,
            registry=registry,
        )
        self.kv_transfer_failures = Counter(
            "tandem_worker_kv_transfer_failures_total",
            "KV pulls that failed (peer gone or restarted, timeout, backend error).",
            ["backend"],
            registry=registry,
        )
        self.kv_claims = Counter(
            "tandem_worker_kv_claims_total",
            "Claims of held KV by decode workers, by outcome (granted, gone: lease ran out "
            "or released, wrong_incarnation: the handle named a previous process).",
            ["outcome"],
            registry=registry,
        )
        self.kv_quarantined_bytes = Counter(
            "tandem_worker_kv_quarantined_bytes_total",
            "Local KV bytes never reused because a failed read could not be stopped.",
            registry=registry,
        )
        self.kv_refused = Counter(
            "tandem_worker_kv_refused_total",
            "Remote KV this decode worker refused to pull, by reason (config_mismatch: "
            "the prefill worker runs another model or KV layout).",
            ["reason"],
            registry=registry,
        )
        self.refused_peers = Counter(
            "tandem_worker_refused_peers_total",
            "Calls refused because the caller holds the cluster's frontend certificate, "
            "not a worker's, by call (ClaimKv, KvAgent, kv_tcp: the TCP KV port).",
            ["call"],
            registry=registry,
        )

        # Series with known label values start at 0, so dashboards and rate() see them
        # from the first scrape rather than after the first claim or refusal.
        for outcome in CLAIM_OUTCOMES:
            self.kv_claims.labels(outcome)
        for reason in REFUSAL_REASONS:
            self.kv_refused.labels(reason)
        for call in WORKER_ONLY_CALLS:
            self.refused_peers.labels(call)

    def watch_load(self, stats: Callable[[], WorkerStats]) -> None:
        self.registry.register(_LoadCollector(stats))

    def watch_engine(self, stats: Callable[[], EngineStats]) -> None:
        self.registry.register(_EngineCollector(stats))
