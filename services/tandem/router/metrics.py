"""The router's Prometheus series: what the autoscaler reads and a user graphs.

Queue depth and active sequences are read from the router's live worker table at
scrape time (a custom collector), so they cost nothing per request and are never
stale. Labels are bounded: ``pool`` (prefill|decode), ``path`` (remote|local),
``reason`` (a DecisionReason), ``stage``, ``kind`` (a WorkerErrorKind), ``state``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tandem.router.workers import PoolLoad

# Prefill on CPU takes seconds to minutes; on GPUs tens of milliseconds to seconds.
PREFILL_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# A worker starts in seconds on a CPU node and in minutes on a GPU one (weights to load).
COLD_START_BUCKETS = (0.5, 1, 2.5, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1800)
KV_TRANSFER_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)


class RouterMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.prefill_decisions = Counter(
            "tandem_router_prefill_decisions_total",
            "Requests by where their prompt was prefilled (remote = prefill pool).",
            ["path", "reason"],
            registry=registry,
        )
        self.retries = Counter(
            "tandem_router_retries_total",
            "Attempts repeated on another worker (or locally) after a worker failed.",
            ["stage"],
            registry=registry,
        )
        self.migrations = Counter(
            "tandem_router_migrations_total",
            "Streams whose decode worker failed after the first token: resumed on another "
            "worker, ended because the request's migration limit was spent (exhausted), or "
            "ended because no other worker could resume them (failed).",
            ["outcome"],
            registry=registry,
        )
        self.worker_errors = Counter(
            "tandem_router_worker_errors_total",
            "Failed worker calls by stage (prefill|decode|health) and kind.",
            ["stage", "kind"],
            registry=registry,
        )
        self.health_poll_errors = Counter(
            "tandem_router_health_poll_errors_total",
            "Unexpected failures inside a health round (stage: membership|worker|round); the "
            "round goes on and the worker concerned is marked unhealthy.",
            ["stage"],
            registry=registry,
        )
        self.tokenizer_mismatches = Counter(
            "tandem_router_tokenizer_mismatches_total",
            "Workers (per incarnation) refused because their tokenizer differs from the "
            "frontend's; they get no work until restarted with the same one.",
            registry=registry,
        )
        self.kv_events = Counter(
            "tandem_router_kv_events_total",
            "Workers' KV cache events applied to the router's index, by outcome (applied, "
            "skipped: the index held no such parent or block).",
            ["outcome"],
            registry=registry,
        )
        self.kv_snapshots = Counter(
            "tandem_router_kv_snapshots_total",
            "KV event streams (re)started from a worker's snapshot.",
            registry=registry,
        )
        self.kv_event_stream_failures = Counter(
            "tandem_router_kv_event_stream_failures_total",
            "KV event streams that broke (the worker's entries are dropped until it resubscribes).",
            registry=registry,
        )
        self.cached_prompt_tokens = Counter(
            "tandem_router_cached_prompt_tokens_total",
            "Prompt tokens the chosen decode worker already held cached, per the index "
            "(tokens in its offload tiers weighted by what onboarding them costs).",
            registry=registry,
        )
        self.rejected = Counter(
            "tandem_router_rejected_requests_total",
            "Requests refused before routing (queue_full -> 429, no_worker and "
            "no_worker_started -> 503).",
            ["reason"],
            registry=registry,
        )
        self.kv_transfer_bytes = Counter(
            "tandem_router_kv_transfer_bytes_total",
            "KV cache bytes moved from prefill to decode workers.",
            registry=registry,
        )
        self.kv_handoff_failures = Counter(
            "tandem_router_kv_handoff_failures_total",
            "KV handoffs that did not happen, by reason: config_mismatch (the decode worker "
            "refused KV of another engine config; routing pairs by config digest, so never "
            "expected), failed (prefill peer gone, transfer error or timeout). The request "
            "was prefilled again, locally or elsewhere.",
            ["reason"],
            registry=registry,
        )
        self.kv_transfer_seconds = Histogram(
            "tandem_router_kv_transfer_duration_seconds",
            "Time decode workers spent pulling a request's KV.",
            buckets=KV_TRANSFER_BUCKETS,
            registry=registry,
        )
        self.prefill_prompt_tokens = Counter(
            "tandem_router_prefill_prompt_tokens_total",
            "Prompt tokens of admitted requests long enough for the prefill pool, counted "
            "once whichever path they take: the arrival rate that sizes that pool.",
            registry=registry,
        )
        self.diverted_prefill_tokens = Gauge(
            "tandem_router_diverted_prefill_tokens",
            "Prompt tokens prefilling on decode workers only because the prefill pool was "
            "empty, unhealthy or saturated (first token not yet back), or waiting for a "
            "prefill worker to start: demand for that pool it does not hold.",
            registry=registry,
        )
        self.diverted_prompts = Counter(
            "tandem_router_diverted_prompts_total",
            "Long prompts sent to a decode worker's prefill because the prefill pool was "
            "empty, unhealthy or saturated: the autoscaler decides at once when this grows.",
            registry=registry,
        )
        self.waiting_for_worker = Gauge(
            "tandem_router_requests_waiting_for_worker",
            "Requests waiting for a decode worker to start (none is ready: the pool is "
            "scaled to zero or its workers are starting); counted in the decode pool's "
            "queue depth too.",
            registry=registry,
        )
        self.cold_start_waits = Histogram(
            "tandem_router_cold_start_wait_seconds",
            "How long requests that found no decode worker waited for one to start, by "
            "outcome: served (one became ready in time), timed_out (503 after "
            "frontend.coldStartTimeoutSeconds) or cancelled (the client left).",
            ["outcome"],
            buckets=COLD_START_BUCKETS,
            registry=registry,
        )
        self.prefill_start_waits = Histogram(
            "tandem_router_prefill_start_wait_seconds",
            "How long long prompts waited for a starting prefill worker (none was ready and "
            "their decode worker streamed), by where they then prefilled: remote (it "
            "started in time) or local (the wait limit passed first).",
            ["path"],
            buckets=PREFILL_BUCKETS,
            registry=registry,
        )
        self.prefill_seconds = Histogram(
            "tandem_router_prefill_duration_seconds",
            "Remote prefill call latency, as the router saw it.",
            buckets=PREFILL_BUCKETS,
            registry=registry,
        )

    def watch(
        self, pool_loads: Callable[[], Mapping[str, PoolLoad]], in_flight: Callable[[], int]
    ) -> None:
        """Register the live gauges; ``pool_loads`` is called at each scrape."""
        self.registry.register(_PoolCollector(pool_loads, in_flight))


class _PoolCollector(Collector):
    def __init__(
        self, pool_loads: Callable[[], Mapping[str, PoolLoad]], in_flight: Callable[[], int]
    ) -> None:
        self._pool_loads = pool_loads
        self._in_flight = in_flight

    def describe(self) -> Iterator[Metric]:
        return iter(())  # values are only known at collect time

    def collect(self) -> Iterator[Metric]:
        loads = self._pool_loads()
        families = {
            "queue_requests": GaugeMetricFamily(
                "tandem_router_queue_depth_requests",
                "Requests waiting on a pool (sent, first token not yet back).",
                labels=["pool"],
            ),
            "queue_tokens": GaugeMetricFamily(
                "tandem_router_queue_depth_tokens",
                "Prompt tokens waiting to be prefilled in a pool.",
                labels=["pool"],
            ),
            "active": GaugeMetricFamily(
                "tandem_router_active_sequences",
                "Sequences generating tokens in a pool.",
                labels=["pool"],
            ),
            "kv": GaugeMetricFamily(
                "tandem_router_kv_utilization_ratio",
                "Mean fraction of KV blocks in use across a pool's healthy workers.",
                labels=["pool"],
            ),
            "workers": GaugeMetricFamily(
                "tandem_router_workers",
                "Workers known to the router, by pool and state (healthy|unhealthy).",
                labels=["pool", "state"],
            ),
        }
        for pool, load in sorted(loads.items()):
            families["queue_requests"].add_metric([pool], load.queued_requests)
            families["queue_tokens"].add_metric([pool], load.queued_tokens)
            families["active"].add_metric([pool], load.active_sequences)
            families["kv"].add_metric([pool], load.kv_utilization)
            families["workers"].add_metric([pool, "healthy"], load.healthy)
            families["workers"].add_metric([pool, "unhealthy"], load.workers - load.healthy)
        yield from families.values()
        in_flight = GaugeMetricFamily(
            "tandem_router_in_flight_requests", "Requests admitted by this router."
        )
        in_flight.add_metric([], self._in_flight())
        yield in_flight
