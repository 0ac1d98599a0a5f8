"""Routing decisions as pure functions: no I/O, no clock, no randomness.

The service feeds these a snapshot of every worker (health plus load, the larger of
what the router itself has in flight and what the worker last reported) and a few
facts about the request; they answer which decode worker streams the answer, whether
the prompt is worth prefilling on the prefill pool, and which prefill worker does it.

Conditional disaggregation: moving KV only pays off for long, uncached prompts. Short
or mostly cached prompts, and every prompt when the prefill pool is empty, unhealthy or
saturated, prefill locally on the decode worker.
"""

from __future__ import annotations

import enum
from collections.abc import Container, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from tandem.api.v1alpha1 import RoutingPolicy


class WorkerRole(enum.StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"
    BOTH = "both"


class PrefillPath(enum.StrEnum):
    REMOTE = "remote"  # prefill pool, KV moved to the decode worker
    LOCAL = "local"  # the decode worker prefills itself


class DecisionReason(enum.StrEnum):
    LONG_PROMPT = "long_prompt"
    SHORT_PROMPT = "short_prompt"
    CACHED_PREFIX = "cached_prefix"
    NO_PREFILL_WORKERS = "no_prefill_workers"
    PREFILL_UNHEALTHY = "prefill_unhealthy"
    PREFILL_SATURATED = "prefill_saturated"
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
    # Chained hashes of the prompt's full blocks (see ``compute_block_hashes``).
    block_hashes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    routing: RoutingPolicy = RoutingPolicy.KV_AWARE
    # Prompts with fewer uncached tokens than this prefill on the decode worker.
    min_prefill_tokens: int = 512
    # Granularity of prefix hashing; overlap is measured in these blocks.
    block_tokens: int = 128
    # Blocks of the prompt that form its prefill affinity key.
    affinity_blocks: int = 4
    # A prefill worker already holding the prompt's prefix keeps it while its pending
    # tokens stay within this many of the least loaded worker's.
    affinity_slack_tokens: int = 8192
    # A prefill worker with this many pending tokens takes no more work.
    prefill_saturation_tokens: int = 131072
    # Whether decode engines reuse cached prefixes (then overlap counts as cached input).
    decode_prefix_cache: bool = False
    # A full prefix hit is worth this many active sequences when choosing a decode worker.
    overlap_weight: float = 2.0
    # Added to a decode worker's cost when its free KV cannot hold the request.
    kv_shortage_penalty: float = 1000.0


@dataclass(frozen=True, slots=True)
class RouteDecision:
    decode: str
    prefill: str | None
    path: PrefillPath
    reason: DecisionReason


def compute_block_hashes(
    tokens: Sequence[int], block_tokens: int, max_blocks: int
) -> tuple[int, ...]:
    """Chained hashes of the first ``max_blocks`` full blocks of ``tokens``.

    Hash ``i`` covers tokens ``[0, (i+1)*block_tokens)``, so equal hashes mean equal
    prefixes (up to collisions). Tuple hashing of ints is deterministic across
    processes, unlike ``hash(bytes)``.
    """
    hashes: list[int] = []
    running = 0
    end = min(len(tokens) // block_tokens, max_blocks) * block_tokens
    for start in range(0, end, block_tokens):
        running = hash((running, *tokens[start : start + block_tokens]))
        hashes.append(running)
    return tuple(hashes)


def count_prefix_overlap(block_hashes: Sequence[int], cached: Container[int]) -> int:
    """Leading blocks of the prompt already present in ``cached``."""
    matched = 0
    for block_hash in block_hashes:
        if block_hash not in cached:
            break
        matched += 1
    return matched


def choose_decode_worker(
    workers: Iterable[WorkerSnapshot],
    request: RouteRequest,
    overlaps: Mapping[str, int],
    config: PolicyConfig,
    *,
    turn: int = 0,
    exclude: Container[str] = (),
) -> WorkerSnapshot | None:
    """The decode worker for a request, or None when no decode worker is available.

    kv-aware: lowest cost, where cost is the worker's load (active plus queued
    sequences), plus ``overlap_weight`` times the uncached fraction of the prompt (when
    engines cache prefixes), plus a penalty when its free KV cannot hold the request.
    least-loaded drops the overlap term; round-robin takes ``turn`` modulo the
    candidates (sorted by key, so the order is stable).
    """
    candidates = sorted(
        (w for w in workers if w.serves_decode and w.available and w.key not in exclude),
        key=lambda w: w.key,
    )
    if not candidates:
        return None
    if config.routing is RoutingPolicy.ROUND_ROBIN:
        return candidates[turn % len(candidates)]
    use_overlap = config.routing is RoutingPolicy.KV_AWARE and config.decode_prefix_cache
    return min(candidates, key=lambda w: _decode_cost(w, request, overlaps, config, use_overlap))


def _decode_cost(
    worker: WorkerSnapshot,
    request: RouteRequest,
    overlaps: Mapping[str, int],
    config: PolicyConfig,
    use_overlap: bool,
) -> float:
    cost = float(worker.active_sequences + worker.queued_requests)
    if use_overlap and request.block_hashes:
        uncached = 1.0 - overlaps.get(worker.key, 0) / len(request.block_hashes)
        cost += config.overlap_weight * uncached
    if worker.kv_block_size > 0 and worker.kv_blocks_total > 0:
        needed_tokens = request.prompt_tokens + request.max_tokens
        needed_blocks = -(-needed_tokens // worker.kv_block_size)
        if needed_blocks > worker.kv_blocks_free:
            cost += config.kv_shortage_penalty
    return cost


def choose_prefill_path(
    workers: Iterable[WorkerSnapshot],
    request: RouteRequest,
    decode_key: str,
    decode_overlap_blocks: int,
    config: PolicyConfig,
    *,
    failed_prefill: AbstractSet[str] = frozenset(),
) -> tuple[PrefillPath, DecisionReason]:
    """Whether a request prefills on the prefill pool (remote) or its decode worker.

    ``failed_prefill`` lists prefill workers that already failed this request."""
    pool = [w for w in workers if w.serves_prefill and w.key != decode_key]
    if not pool:
        return PrefillPath.LOCAL, DecisionReason.NO_PREFILL_WORKERS
    if request.prompt_tokens < config.min_prefill_tokens:
        return PrefillPath.LOCAL, DecisionReason.SHORT_PROMPT
    cached_tokens = 0
    if config.decode_prefix_cache:
        cached_tokens = decode_overlap_blocks * config.block_tokens
    if request.prompt_tokens - cached_tokens < config.min_prefill_tokens:
        return PrefillPath.LOCAL, DecisionReason.CACHED_PREFIX
    available = [w for w in pool if w.available]
    if not available:
        return PrefillPath.LOCAL, DecisionReason.PREFILL_UNHEALTHY
    untried = [w for w in available if w.key not in failed_prefill]
    if not untried:
        return PrefillPath.LOCAL, DecisionReason.PREFILL_FAILED
    if all(_saturated(w, config) for w in untried):
        return PrefillPath.LOCAL, DecisionReason.PREFILL_SATURATED
    return PrefillPath.REMOTE, DecisionReason.LONG_PROMPT


def _saturated(worker: WorkerSnapshot, config: PolicyConfig) -> bool:
    return worker.queued_prefill_tokens >= config.prefill_saturation_tokens


def choose_prefill_worker(
    workers: Iterable[WorkerSnapshot],
    sticky: str | None,
    config: PolicyConfig,
    *,
    exclude: Container[str] = (),
) -> WorkerSnapshot | None:
    """Least pending prefill tokens, preferring ``sticky`` (the worker that last took
    this prompt prefix) while its load is within ``affinity_slack_tokens`` of the
    least loaded one. Saturated workers are skipped."""
    candidates = [
        w
        for w in workers
        if w.serves_prefill and w.available and w.key not in exclude and not _saturated(w, config)
    ]
    if not candidates:
        return None
    least = min(candidates, key=lambda w: (w.queued_prefill_tokens, w.queued_requests, w.key))
    if sticky is not None and sticky != least.key:
        for worker in candidates:
            if worker.key == sticky:
                slack = worker.queued_prefill_tokens - least.queued_prefill_tokens
                if slack <= config.affinity_slack_tokens:
                    return worker
                break
    return least


def affinity_key(request: RouteRequest, config: PolicyConfig) -> int | None:
    """The prompt's prefill affinity key: the hash covering its first few blocks."""
    if not request.block_hashes:
        return None
    index = min(config.affinity_blocks, len(request.block_hashes)) - 1
    return request.block_hashes[index]


def choose_route(
    workers: Sequence[WorkerSnapshot],
    request: RouteRequest,
    overlaps: Mapping[str, int],
    sticky_prefill: str | None,
    config: PolicyConfig,
    *,
    turn: int = 0,
    failed_decode: AbstractSet[str] = frozenset(),
    failed_prefill: AbstractSet[str] = frozenset(),
) -> RouteDecision | None:
    """The full decision for one request; None when no decode worker is available.

    ``failed_*`` name workers that already failed this request (retries avoid them)."""
    decode = choose_decode_worker(
        workers, request, overlaps, config, turn=turn, exclude=failed_decode
    )
    if decode is None:
        return None
    path, reason = choose_prefill_path(
        workers,
        request,
        decode.key,
        overlaps.get(decode.key, 0),
        config,
        failed_prefill=failed_prefill,
    )
    prefill = None
    if path is PrefillPath.REMOTE:
        prefill = choose_prefill_worker(
            workers, sticky_prefill, config, exclude=failed_prefill | {decode.key}
        )
    if prefill is None:
        if path is PrefillPath.REMOTE:  # defensive: choose_prefill_path saw a candidate
            reason = DecisionReason.PREFILL_UNHEALTHY
        return RouteDecision(decode=decode.key, prefill=None, path=PrefillPath.LOCAL, reason=reason)
    return RouteDecision(decode=decode.key, prefill=prefill.key, path=path, reason=reason)
