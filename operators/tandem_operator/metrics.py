"""The operator's Prometheus metrics (``tandem_operator_*``), defined once."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter(
    "tandem_operator_reconcile_total",
    "Reconciles of an InferenceCluster, by outcome (success, error, requeue).",
    ["outcome"],
)
RECONCILE_DURATION = Histogram(
    "tandem_operator_reconcile_duration_seconds",
    "Wall time of one reconcile.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
RECONCILE_ERRORS = Counter(
    "tandem_operator_reconcile_errors_total",
    "Failed reconciles, by error kind (api, timeout, invalid_spec, ...).",
    ["kind"],
)
APPLIES = Counter(
    "tandem_operator_apply_total",
    "Server-side applies sent, by object kind.",
    ["kind"],
)
APPLIES_SKIPPED = Counter(
    "tandem_operator_apply_skipped_total",
    "Applies skipped because the live object already matched, by object kind.",
    ["kind"],
)
QUEUE_DEPTH = Gauge("tandem_operator_queue_depth", "Clusters waiting to be reconciled.")
QUEUE_ADDS = Counter("tandem_operator_queue_adds_total", "Keys added to the work queue.")
QUEUE_RETRIES = Counter("tandem_operator_queue_retries_total", "Keys requeued after an error.")
QUEUE_WAIT = Histogram(
    "tandem_operator_queue_wait_seconds",
    "Time a key waited in the queue before a worker took it.",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0),
)
WATCH_RESTARTS = Counter(
    "tandem_operator_watch_restarts_total", "Watches restarted after an error, by kind.", ["kind"]
)
IS_LEADER = Gauge("tandem_operator_leader", "1 while this replica holds the leader Lease.")
MANAGED_CLUSTERS = Gauge("tandem_operator_managed_clusters", "InferenceClusters in the cache.")
POOL_REPLICAS = Gauge(
    "tandem_operator_pool_replicas",
    "Worker replicas of each pool, by state (desired: the WorkerPool's target; ready), as "
    "the last status write counted them; max: the pool's autoscaling ceiling (maxReplicas, "
    "only while Tandem's own autoscaler runs: autoscaling enabled, mode builtin).",
    ["inference_cluster_namespace", "inference_cluster", "pool", "state"],
)
SLO_TARGET = Gauge(
    "tandem_operator_slo_target_seconds",
    "Each InferenceCluster's latency targets (spec.slo), by objective: ttft_p90 "
    "(ttftP90Seconds) and itl_p90 (itlP90Seconds), 90th percentiles over requests.",
    ["inference_cluster_namespace", "inference_cluster", "objective"],
)
EVENTS_EMITTED = Counter(
    "tandem_operator_events_total", "Kubernetes Events emitted, by type.", ["type"]
)

# The autoscaler loop (leader only; builtin mode).
AUTOSCALER_LOOPS = Gauge(
    "tandem_operator_autoscaler_loops", "InferenceClusters whose autoscaler loop is running."
)
AUTOSCALER_ROUNDS = Counter(
    "tandem_operator_autoscaler_rounds_total",
    "Autoscaler rounds, by outcome (decided, scrape_failed, api_error).",
    ["outcome"],
)
AUTOSCALER_EARLY_ROUNDS = Counter(
    "tandem_operator_autoscaler_early_rounds_total",
    "Rounds taken before the interval was up because the router diverted long prompts.",
)
AUTOSCALER_DECISIONS = Counter(
    "tandem_operator_autoscaler_decisions_total",
    "Per-pool decisions, by pool and reason (a ScaleReason).",
    ["pool", "reason"],
)
AUTOSCALER_SCALES = Counter(
    "tandem_operator_autoscaler_scale_writes_total",
    "Replica changes written to WorkerPool /scale, by pool and direction (up, down).",
    ["pool", "direction"],
)
AUTOSCALER_SCRAPE_DURATION = Histogram(
    "tandem_operator_autoscaler_scrape_duration_seconds",
    "Time to read one cluster's frontends (/metrics and /readyz).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
