"""What flows through the router: its settings, a generation request, chunks back,
and the per-worker view that ``/readyz`` and ``tandem status`` show."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tandem.engines.base import SamplingParams
from tandem.router.policy import DecisionReason, PolicyConfig, PrefillPath


@dataclass(frozen=True, slots=True)
class RouterConfig:
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    max_queued_requests: int = 256
    max_active_requests: int = 1024
    retry_after_seconds: int = 1
    prefill_timeout_seconds: float = 600.0
    first_token_timeout_seconds: float = 600.0
    stall_timeout_seconds: float = 120.0
    # A decode stream's deadline: first-token timeout plus this per requested token.
    max_seconds_per_token: float = 1.0
    release_timeout_seconds: float = 5.0
    health_interval_seconds: float = 1.0
    health_timeout_seconds: float = 2.0
    max_prefill_attempts: int = 2
    max_decode_attempts: int = 3
    # A stream whose decode worker fails after its first token goes on on another one, at
    # most this many times (0: the stream ends with an error, as before migration).
    max_migrations: int = 2
    # While the worker set changes (a rollout, a scale-down, a replacement pod) there can
    # be a moment with no usable decode worker: a request waits this long, with health
    # rounds run at once, for one to appear instead of failing.
    worker_wait_seconds: float = 15.0
    # With the decode pool allowed to scale to zero: how long a request waits for a
    # decode worker to start when there is none (cold start); 0: never (it gets 503).
    cold_start_wait_seconds: float = 0.0
    # The frontend's tokenizer (tandem.tokenization.selection.fingerprint); a worker
    # reporting another one gets no work. "" accepts any worker (no tokenizer to agree on).
    tokenizer_fingerprint: str = ""


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    request_id: str
    prompt: Sequence[int]
    sampling: SamplingParams


@dataclass(frozen=True, slots=True)
class RouteInfo:
    """How a request was served; on its first chunk."""

    path: PrefillPath
    reason: DecisionReason
    decode_worker: str
    prefill_worker: str | None
    kv_bytes: int = 0
    kv_seconds: float = 0.0
    # The time to first token, phase by phase (the frontend's TTFT breakdown): held in
    # the tenant queue, choosing workers (waits for one included), remote prefill, and
    # from the decode call to its first chunk less the KV transfer. Retried attempts
    # add to the phase they failed in.
    queue_seconds: float = 0.0
    route_seconds: float = 0.0
    prefill_seconds: float = 0.0
    first_token_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class GenerationChunk:
    token_ids: tuple[int, ...]
    finish_reason: str | None = None
    route: RouteInfo | None = None  # first chunk only


@dataclass(frozen=True, slots=True)
class WorkerView:
    """A worker as ``/readyz`` and ``tandem status`` show it."""

    address: str
    role: str
    healthy: bool
    draining: bool
    worker_id: str
    in_flight: int
    last_error: str
    # Measured prompt tokens per second through this worker's prefill queue; None
    # until a remote prefill has completed (what the router judges wait time by).
    prefill_tokens_per_second: float | None = None
