"""The frontend's Prometheus series (latency as clients see it, requests, errors).

Labels are bounded: ``endpoint`` (chat|completions|models|other), ``status`` (HTTP
status code), ``code`` (our error codes), ``path`` (remote|local), ``phase`` (one of
``TTFT_PHASES``), ``tenant`` (a tenant
the frontend document names, ``anonymous``, or ``other``: see
``tandem.frontend.tenancy.tenant_label``).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.5)
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# Prompt and answer lengths, 1 to 1M tokens in steps of 2^(1/3) (26%; whole tokens below
# 16): fine enough that a median read from the buckets lands within a few percent, few
# enough to scrape cheaply.
LENGTH_BUCKETS = tuple(sorted({round(2 ** (k / 3)) for k in range(61)}))
# The time to first token, phase by phase (tandem_frontend_ttft_phase_seconds): held in
# the tenant queue, tokenizing, choosing workers, remote prefill, moving its KV, and the
# decode worker's first chunk less the KV transfer (on the local path: the local prefill).
TTFT_PHASES = ("queue", "tokenize", "route", "prefill", "kv_transfer", "first_token")
# The series the operator re-plans from (tandem.sim.workload_observation).
PROMPT_LENGTH = "tandem_frontend_request_prompt_tokens"
ANSWER_LENGTH = "tandem_frontend_request_generation_tokens"


class FrontendMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "tandem_frontend_requests_total",
            "HTTP requests answered, by endpoint and status code.",
            ["endpoint", "status"],
            registry=registry,
        )
        self.errors = Counter(
            "tandem_frontend_errors_total",
            "Errors returned to clients (or ending a stream), by error code.",
            ["code"],
            registry=registry,
        )
        self.request_seconds = Histogram(
            "tandem_frontend_request_duration_seconds",
            "Arrival to last byte, by endpoint.",
            ["endpoint"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.ttft_seconds = Histogram(
            "tandem_frontend_time_to_first_token_seconds",
            "Arrival to first generated token, by prefill path (remote|local).",
            ["path"],
            buckets=TTFT_BUCKETS,
            registry=registry,
        )
        self.ttft_phase_seconds = Histogram(
            "tandem_frontend_ttft_phase_seconds",
            "Time to first token by phase (queue, tokenize, route, prefill, kv_transfer, "
            "first_token) and prefill path (remote|local); prefill and kv_transfer only "
            "for remote prefills.",
            ["phase", "path"],
            buckets=TTFT_BUCKETS,
            registry=registry,
        )
        self.itl_seconds = Histogram(
            "tandem_frontend_inter_token_latency_seconds",
            "Time between consecutive generated tokens.",
            buckets=ITL_BUCKETS,
            registry=registry,
        )
        self.request_itl_seconds = Histogram(
            "tandem_frontend_request_inter_token_latency_seconds",
            "Each request's mean inter-token latency (first token to last over the tokens "
            "after the first), when its stream ends: what spec.slo.itlP90Seconds bounds.",
            buckets=ITL_BUCKETS,
            registry=registry,
        )
        self.prompt_tokens = Counter(
            "tandem_frontend_prompt_tokens_total",
            "Prompt tokens of requests that reached a worker.",
            registry=registry,
        )
        self.prompt_length = Histogram(
            PROMPT_LENGTH,
            "Prompt length of each request that reached a worker (counted at its first token).",
            buckets=LENGTH_BUCKETS,
            registry=registry,
        )
        self.answer_length = Histogram(
            ANSWER_LENGTH,
            "Tokens generated for each request, counted when its stream ends.",
            buckets=LENGTH_BUCKETS,
            registry=registry,
        )
        self.generation_tokens = Counter(
            "tandem_frontend_generation_tokens_total",
            "Tokens generated for clients.",
            registry=registry,
        )


# Time a request waits in the frontend's tenant queue: none at all while there is room,
# up to the first-token timeout under overload.
HELD_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class TenantMetrics:
    """Per-tenant series of ``tandem.frontend.tenancy`` (``tenant`` label bounded)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "tandem_frontend_tenant_requests_total",
            "Requests by tenant and what the tenant gate did with them, once each: "
            "admitted (sent to the router), rejected_in_flight, rejected_tokens (429 or "
            "400 from the tenant's limits), queue_full (429: the queue was full), "
            "displaced (429: held, then pushed out by a tenant under its fair share), "
            "cancelled (the client left while held).",
            ["tenant", "outcome"],
            registry=registry,
        )
        self.held = Gauge(
            "tandem_frontend_tenant_held_requests",
            "Requests held in the frontend's tenant queue (not yet sent to the router).",
            ["tenant"],
            registry=registry,
        )
        self.tokens = Counter(
            "tandem_frontend_tenant_tokens_total",
            "Tokens by tenant: prompt (counted at the first token) and generated.",
            ["tenant", "kind"],
            registry=registry,
        )
        self.held_seconds = Histogram(
            "tandem_frontend_tenant_queue_wait_seconds",
            "Time each request sent to the router spent held in the frontend's tenant "
            "queue (0 when there was room).",
            ["tenant"],
            buckets=HELD_BUCKETS,
            registry=registry,
        )
