"""Routing decisions as pure functions: no I/O, no clock, no randomness.

The service feeds these a snapshot of every worker (health plus load, the larger of
what the router itself has in flight and what the worker last reported), how many of
the prompt's tokens each worker would not have to compute (from the workers' KV events:
its device pool's prefix in Dynamo's radix tree, then its offload tiers', each tier's
tokens weighted by what onboarding them costs, ``onboarding``), and a few facts about
the request; they answer which decode worker streams the answer, whether the prompt is
worth prefilling on the prefill pool, and which prefill worker does it. Both choices
weigh cached tokens against load.

Conditional disaggregation: moving KV only pays off for long, uncached prompts. Short
or mostly cached prompts, and every prompt when the prefill pool is empty, unhealthy,
saturated or runs another model, prefill locally on the decode worker.

A long prompt with no ready prefill worker but one starting (in membership, not ready
yet) may wait for it instead, when a start wait limit is set and its decode worker
streams: one late first token rather than every stream there stalled for a whole
prefill. Past the limit it prefills locally as before.

Saturated is judged in time when a wait limit is set: a prompt prefilled on a decode
worker stalls every stream there for its whole prefill (each of those misses its
inter-token target), so it goes there only when the prefill pool would take longer
than the limit (the TTFT target) -- queued tokens plus its own over the worker's
measured prefill rate. Without a limit, or before a worker's rate is known, a worker
with ``prefill_saturation_tokens`` queued is saturated.
"""

from __future__ import annotations

import enum
from collections.abc import Container, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from tandem.api.v1alpha1 import RoutingPolicy
from tandem.kv.events import Tier
from tandem.router.onboarding import DEFAULT_TIER_WEIGHTS


class WorkerRole(enum.StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"
    BOTH = "both"


class PrefillPath(enum.StrEnum):
    REMOTE = "remote"  # prefill pool, KV moved to the decode worker
    LOCAL = "local"  # the decode worker prefills itself
    WAIT = "wait"  # no prefill worker yet: look again when one has started


class DecisionReason(enum.StrEnum):
    LONG_PROMPT = "long_prompt"
    SHORT_PROMPT = "short_prompt"
    CACHED_PREFIX = "cached_prefix"
    NO_PREFILL_WORKERS = "no_prefill_workers"
    PREFILL_STARTING = "prefill_starting"  # none ready, one starting, decode worker busy
    PREFILL_UNHEALTHY = "prefill_unhealthy"
    PREFILL_SATURATED = "prefill_saturated"
    # Every prefill worker past its limit, but the decode worker streams sequences that a
    # local prefill would stall: the prompt queues on the prefill pool instead.
    DECODE_BUSY = "decode_busy"
    PREFILL_INCOMPATIBLE = "prefill_incompatible"  # other model/KV layout than the decoder
    PREFILL_FAILED = "prefill_failed"  # set by the service after remote attempts failed


@dataclass(frozen=True, slots=True)
class WorkerSnapshot:
    """One worker as the policy sees it. ``key`` is its address (unique)."""

    key: str
    role: WorkerRole
    healthy: bool = True
    draining: bool = False
    queued_prefill_tokens: int = 0
    queued_requests: int = 0
    active_sequences: int = 0
    kv_blocks_free: int = 0
    kv_blocks_total: int = 0
    kv_block_size: int = 0
    config_digest: str = ""  # model + KV layout; "" when unknown
    # Measured by whoever routes to it (tandem.router.prefill_rate); None until then.
    prefill_tokens_per_second: float | None = None

    @property
    def available(self) -> bool:
        return self.healthy and not self.draining

    @property
    def serves_prefill(self) -> bool:
        return self.role is not WorkerRole.DECODE

    @property
    def serves_decode(self) -> bool:
        return self.role is not WorkerRole.PREFILL

    @property
    def kv_utilization(self) -> float:
        if self.kv_blocks_total <= 0:
            return 0.0
        return 1.0 - self.kv_blocks_free / self.kv_blocks_total


@dataclass(frozen=True, slots=True)
class RouteRequest:
    prompt_tokens: int
    max_tokens: int


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    routing: RoutingPolicy = RoutingPolicy.KV_AWARE
    # Prompts with fewer uncached tokens than this prefill on the decode worker.
    min_prefill_tokens: int = 512
    # A prefill worker with this many pending tokens takes no more work...
    prefill_saturation_tokens: int = 131072
    # ...or, when set and the worker's rate is known, one that would take longer than
    # this to prefill a prompt, its queue included.
    max_prefill_wait_seconds: float | None = None
    # A long prompt finding no ready prefill worker waits up to this long for one that is
    # starting, while its decode worker streams (None: it never waits).
    max_prefill_start_wait_seconds: float | None = None
    # A full prefix hit is worth this many active sequences when choosing a decode worker.
    overlap_weight: float = 2.0
    # Added to a decode worker's cost when its free KV cannot hold the request.
    kv_shortage_penalty: float = 1000.0
    # What a cached token in each tier is worth against computing it (``onboarding``).
    tier_weights: Mapping[Tier, float] = field(default_factory=lambda: DEFAULT_TIER_WEIGHTS)


@dataclass(frozen=True, slots=True)
class RouteDecision:
    decode: str
    prefill: str | None
    path: PrefillPath
    reason: DecisionReason


def choose_decode_worker(
    workers: Iterable[WorkerSnapshot],
    request: RouteRequest,
    cached: Mapping[str, int],
    config: PolicyConfig,
    *,
    turn: int = 0,
    exclude: Container[str] = (),
) -> WorkerSnapshot | None:
    """The decode worker for a request, or None when no decode worker is available.

    ``cached`` maps a worker to the prompt tokens it would not have to compute (its
    KV cache's, offload tiers' discounted: ``onboarding.saved_tokens``).
    kv-aware: lowest cost, where cost is the worker's load (active plus queued
    sequences), plus ``overlap_weight`` times the uncached fraction of the prompt, plus
    a penalty when its free KV cannot hold what the request still needs. least-loaded
    drops the cache term; round-robin takes ``turn`` modulo the candidates (sorted by
    key, so the order is stable).
    """
    candidates = sorted(
        (w for w in workers if w.serves_decode and w.available and w.key not in exclude),
        key=lambda w: w.key,
    )
    if not candidates:
        return None
    if config.routing is RoutingPolicy.ROUND_ROBIN:
        return candidates[turn % len(candidates)]
    if config.routing is not RoutingPolicy.KV_AWARE:
        cached = {}
    return min(candidates, key=lambda w: _decode_cost(w, request, cached.get(w.key, 0), config))


def _decode_cost(
    worker: WorkerSnapshot, request: RouteRequest, cached_tokens: int, config: PolicyConfig
) -> float:
    cost = float(worker.active_sequences + worker.queued_requests)
    if request.prompt_tokens > 0:
        cost += config.overlap_weight * (1.0 - cached_tokens / request.prompt_tokens)
    if worker.kv_block_size > 0 and worker.kv_blocks_total > 0:
        needed_tokens = request.prompt_tokens - cached_tokens + request.max_tokens
        needed_blocks = -(-needed_tokens // worker.kv_block_size)
        if needed_blocks > worker.kv_blocks_free:
            cost += config.kv_shortage_penalty
    return cost


def compatible(prefill: WorkerSnapshot, decode_digest: str) -> bool:
    """Whether ``prefill``'s KV can continue on a decode worker with ``decode_digest``."""
    return digests_match(prefill.config_digest, decode_digest)


def digests_match(kv_digest: str, decode_digest: str) -> bool:
    """Whether KV of engine config ``kv_digest`` can continue on a decode worker of
    ``decode_digest`` (unknown digests are not held against a worker; the decode worker
    checks again)."""
    return not kv_digest or not decode_digest or kv_digest == decode_digest


def choose_prefill_path(
    workers: Iterable[WorkerSnapshot],
    request: RouteRequest,
    decode: WorkerSnapshot,
    decode_cached_tokens: int,
    config: PolicyConfig,
    *,
    failed_prefill: AbstractSet[str] = frozenset(),
    prefill_starting: int = 0,
    waited_seconds: float = 0.0,
) -> tuple[PrefillPath, DecisionReason]:
    """Whether a request prefills on the prefill pool (remote), on its decode worker
    (local), or waits for a prefill worker that is starting.

    ``decode_cached_tokens``: prompt tokens the decode worker's cache already holds;
    ``failed_prefill`` lists prefill workers that already failed this request;
    ``prefill_starting`` counts prefill workers in membership but not ready yet, and
    ``waited_seconds`` is how long this request has waited for them."""
    # A short prompt stays local whatever the prefill pool holds: counting it as
    # "no_prefill_workers" while that pool is at zero would report demand it never had.
    if request.prompt_tokens < config.min_prefill_tokens:
        return PrefillPath.LOCAL, DecisionReason.SHORT_PROMPT
    if config.routing is not RoutingPolicy.KV_AWARE:
        decode_cached_tokens = 0
    uncached = request.prompt_tokens - decode_cached_tokens
    may_wait = (
        uncached >= config.min_prefill_tokens
        and prefill_starting > 0
        and config.max_prefill_start_wait_seconds is not None
        and waited_seconds < config.max_prefill_start_wait_seconds
        and _decode_busy(decode)
    )
    pool = [w for w in workers if w.serves_prefill and w.key != decode.key]
    if not pool:
        if may_wait:
            return PrefillPath.WAIT, DecisionReason.PREFILL_STARTING
        return PrefillPath.LOCAL, DecisionReason.NO_PREFILL_WORKERS
    if uncached < config.min_prefill_tokens:
        return PrefillPath.LOCAL, DecisionReason.CACHED_PREFIX
    available = [w for w in pool if w.available]
    if not available:
        if may_wait:
            return PrefillPath.WAIT, DecisionReason.PREFILL_STARTING
        return PrefillPath.LOCAL, DecisionReason.PREFILL_UNHEALTHY
    available = [w for w in available if compatible(w, decode.config_digest)]
    if not available:
        return PrefillPath.LOCAL, DecisionReason.PREFILL_INCOMPATIBLE
    untried = [w for w in available if w.key not in failed_prefill]
    if not untried:
        return PrefillPath.LOCAL, DecisionReason.PREFILL_FAILED
    if all(_saturated(w, request.prompt_tokens, config) for w in untried):
        if _decode_busy(decode):
            return PrefillPath.REMOTE, DecisionReason.DECODE_BUSY
        return PrefillPath.LOCAL, DecisionReason.PREFILL_SATURATED
    return PrefillPath.REMOTE, DecisionReason.LONG_PROMPT


def _decode_busy(decode: WorkerSnapshot) -> bool:
    """Whether a local prefill would stall work on ``decode``: it stops every sequence
    the worker streams for as long as it runs (~0.3 s for 32k on a GB200: a 64-token
    answer's whole ITL budget), while a prompt waiting for the prefill pool costs only
    that prompt. A local prefill already pending counts too: a clump of diverted prompts
    would otherwise queue here one after another, each stalling the one before as it
    starts to stream. A sequence awaiting remotely prefilled KV does not: while the
    prefill pool is short the decode worker's own prefills are capacity it needs."""
    return decode.active_sequences > 0 or decode.queued_prefill_tokens > 0


def _saturated(worker: WorkerSnapshot, prompt_tokens: int, config: PolicyConfig) -> bool:
    """Whether a prefill worker should take no more prompts: it would take longer than
    ``max_prefill_wait_seconds`` to prefill this one, its queue first (when both the
    limit and the worker's rate are known), else it holds ``prefill_saturation_tokens``."""
    limit, rate = config.max_prefill_wait_seconds, worker.prefill_tokens_per_second
    if limit is not None and rate:
        return (worker.queued_prefill_tokens + prompt_tokens) / rate > limit
    return worker.queued_prefill_tokens >= config.prefill_saturation_tokens


def choose_prefill_worker(
    workers: Iterable[WorkerSnapshot],
    request: RouteRequest,
    cached: Mapping[str, int],
    config: PolicyConfig,
    *,
    decode_digest: str = "",
    exclude: Container[str] = (),
    include_saturated: bool = False,
) -> WorkerSnapshot | None:
    """The prefill worker that finishes this prompt first: fewest tokens to compute,
    its pending prefill tokens plus the part of this prompt it does not hold cached
    (kv-aware; other policies ignore the cache). Saturated workers (unless
    ``include_saturated``) and workers running another model than the decode worker
    (``decode_digest``) are skipped."""
    candidates = [
        w
        for w in workers
        if w.serves_prefill
        and w.available
        and w.key not in exclude
        and (include_saturated or not _saturated(w, request.prompt_tokens, config))
        and compatible(w, decode_digest)
    ]
    if not candidates:
        return None
    if config.routing is not RoutingPolicy.KV_AWARE:
        cached = {}

    def cost(worker: WorkerSnapshot) -> tuple[int, int, str]:
        uncached = request.prompt_tokens - cached.get(worker.key, 0)
        return (worker.queued_prefill_tokens + uncached, worker.queued_requests, worker.key)

    return min(candidates, key=cost)


def choose_route(
    workers: Sequence[WorkerSnapshot],
    request: RouteRequest,
    cached: Mapping[str, int],
    config: PolicyConfig,
    *,
    turn: int = 0,
    failed_decode: AbstractSet[str] = frozenset(),
    failed_prefill: AbstractSet[str] = frozenset(),
    prefill_starting: int = 0,
    waited_seconds: float = 0.0,
) -> RouteDecision | None:
    """The full decision for one request; None when no decode worker is available.

    ``cached`` maps workers to the prompt tokens their KV caches hold; ``failed_*``
    name workers that already failed this request (retries avoid them);
    ``prefill_starting`` and ``waited_seconds`` as ``choose_prefill_path`` reads them."""
    decode = choose_decode_worker(
        workers, request, cached, config, turn=turn, exclude=failed_decode
    )
    if decode is None:
        return None
    path, reason = choose_prefill_path(
        workers,
        request,
        decode,
        cached.get(decode.key, 0),
        config,
        failed_prefill=failed_prefill,
        prefill_starting=prefill_starting,
        waited_seconds=waited_seconds,
    )
    if path is PrefillPath.WAIT:
        return RouteDecision(decode=decode.key, prefill=None, path=path, reason=reason)
    prefill = None
    if path is PrefillPath.REMOTE:
        prefill = choose_prefill_worker(
            workers,
            request,
            cached,
            config,
            decode_digest=decode.config_digest,
            exclude=failed_prefill | {decode.key},
            include_saturated=reason is DecisionReason.DECODE_BUSY,
        )
    if prefill is None:
        if path is PrefillPath.REMOTE:  # defensive: choose_prefill_path saw a candidate
            reason = DecisionReason.PREFILL_UNHEALTHY
        return RouteDecision(decode=decode.key, prefill=None, path=PrefillPath.LOCAL, reason=reason)
    return RouteDecision(decode=decode.key, prefill=prefill.key, path=path, reason=reason)
