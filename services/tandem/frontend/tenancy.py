"""Per-tenant limits and fair queuing in front of the router.

Each request belongs to a tenant (``RequestContext.tenant``, from its API key). The
gate decides three things; 1 and 3 need no prompt, so they are decided first, before the
prompt is tokenized (``TenantScheduler.refusal``), and 2 after:

1. **In-flight limit**: a tenant with ``maxInFlightRequests`` requests admitted and not
   finished (held, dispatched or streaming) gets 429 at once.
2. **Tokens per minute**: a token bucket per tenant (capacity one minute's tokens,
   refilled continuously). A request *reserves* ``prompt + max_tokens`` at admission
   (at most the capacity) and *settles* at its end: the unused part goes back, tokens
   generated beyond the reservation are owed (the bucket goes below zero), and a
   request that never got its first token (refused, failed, cancelled) costs nothing. Reserving
   up front, as OpenAI's own limiter counts ``max_tokens``, is what bounds a burst:
   charging only as tokens stream would let a tenant with a full bucket start any
   number of requests at once and overdraw by all their answers. A request that would
   overdraw gets 429 with ``Retry-After`` = whole seconds until the bucket covers it; a
   prompt larger than the whole bucket can never fit and gets 400.
3. **Queue bound**: at most ``max_queued_requests`` requests are held here or sent to
   the router without their first token. When that is full, a newcomer whose tenant
   occupies less than its weighted share of it displaces the newest held request of
   the tenant most over its share (that one gets the 429); otherwise the newcomer
   gets the 429.

Admitted requests are **held** until the dispatch bound has room: requests sent to the
router and awaiting their first token are at most ``dispatch_depth`` x the ready
workers (at least ``dispatch_depth``, so that the router's own wait for a worker still
works when none is ready). Beyond that, a burst would only sit in the workers' FIFO
queues, where a light tenant's request waits behind all of it. Held requests leave in
start-time fair queuing order (SFQ, Goyal et al. 1996): each gets a start tag
``max(V, the tenant's previous finish tag)`` and a finish tag ``start + prompt tokens /
weight``; the lowest start tag goes next, and ``V`` is the start tag of the latest
request sent. A tenant with nothing queued therefore gets the next slot, and
backlogged tenants share slots in proportion to their weights. With one tenant this is
FIFO, and a request leaves at once whenever there is room: the bound is re-checked at
each first token, each request's end and each router health round (readiness
changes), so workers never idle while requests are held.

Two rules keep a light tenant's first token close to what it gets alone while another
tenant keeps the workers full (issue 34's bench, ``tandem_dev.bench.tenants``):

* **Priority**: each request leaves ranked (``SamplingParams.priority``, carried to the
  worker's engine): ``PRIORITY_UNDER_SHARE`` when its tenant holds less than its
  weighted share of the work at the workers (prompt tokens sent and not finished, the
  cost SFQ charges), else ``PRIORITY_DEFAULT`` (``fair_priority``). The reference and
  simulated engines admit and prefill by priority, then arrival
  (``tandem.engines.priority``), so the light request does not queue behind the heavy
  tenant's backlog or share a step's budget with its prompts (TensorRT-LLM 1.2.1 has no
  request priority: there only the order here applies). It is never taken from the
  request: a caller cannot rank itself up.
* **Past a full bound, a worker's depth for tenants under their share**: such a tenant
  with fewer than ``dispatch_depth`` requests awaiting their first token sends its next
  one even when the bound is reached. Otherwise a light request waits here for one of
  the heavy tenant's prefills to finish, and then for the worker's next step to begin,
  before its own (ranked-up) prefill can start. One each is not enough: a light tenant
  at a fifth of capacity has a second request arriving during about a fifth of its
  prefills, and that one would wait out the first's whole time to first token. The
  bound is exceeded by at most ``dispatch_depth`` per tenant under its share; a tenant
  stops being under its share as its requests reach the workers, so this cannot carry
  a backlog past the bound.

``TenantScheduler`` holds the decisions (no I/O, no clock: times are arguments);
``TenantGate`` is the asyncio shell that the serving layer streams through.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import math
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NoReturn, Protocol

from tandem.errors import TandemError
from tandem.frontend.config import TenancySettings, TenantLimits
from tandem.frontend.errors import INVALID_REQUEST
from tandem.frontend.metrics import TenantMetrics
from tandem.frontend.preparation import ANONYMOUS_TENANT
from tandem.router.errors import OverloadedError
from tandem.router.messages import GenerationChunk, GenerationRequest, RouterConfig, WorkerView
from tandem.telemetry.tracing import TRACER

logger = logging.getLogger(__name__)

DEFAULT_DISPATCH_DEPTH = 2
PRIORITY_DEFAULT = 0
PRIORITY_UNDER_SHARE = 1
OTHER_TENANTS = "other"
SECONDS_PER_MINUTE = 60.0


def tenant_label(tenant: str, settings: TenancySettings) -> str:
    """The ``tenant`` metric label: bounded by the tenants the document names."""
    if tenant == ANONYMOUS_TENANT or tenant in settings.tenants:
        return tenant
    return OTHER_TENANTS


def limits_for(tenant: str, settings: TenancySettings) -> TenantLimits:
    return settings.tenants.get(tenant, settings.defaults)


# ---------------------------------------------------------------------- errors


class TenantRequestLimitError(OverloadedError):
    """The tenant has ``maxInFlightRequests`` requests in flight (429 + Retry-After)."""

    type = "requests"  # what OpenAI sends for a request-rate limit
    code = "rate_limit_exceeded"


class TenantTokenLimitError(OverloadedError):
    """The tenant's tokens per minute are spent for now (429 + Retry-After)."""

    type = "tokens"  # what OpenAI sends for a token-rate limit
    code = "rate_limit_exceeded"


class TenantRequestTooLargeError(TandemError):
    """One request needs more tokens than the tenant's whole minute: retrying never helps."""

    type = INVALID_REQUEST
    code = "rate_limit_exceeded"
    http_status = 400


# ---------------------------------------------------------------------- pure state


@dataclass(slots=True)
class TokenBucket:
    """``capacity`` tokens, refilled at ``rate`` per second; ``level`` may go negative
    (tokens owed by requests that generated more than they reserved)."""

    capacity: float
    rate: float
    level: float
    updated: float

    @classmethod
    def per_minute(cls, tokens_per_minute: int, now: float) -> TokenBucket:
        capacity = float(tokens_per_minute)
        return cls(capacity, capacity / SECONDS_PER_MINUTE, capacity, now)

    def refill(self, now: float) -> None:
        if now > self.updated:
            self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
            self.updated = now

    def seconds_until(self, tokens: float, now: float) -> float:
        """Seconds until ``level`` reaches ``tokens`` (0 when it already does)."""
        self.refill(now)
        return max(0.0, (tokens - self.level) / self.rate)

    def full(self, now: float) -> bool:
        self.refill(now)
        return self.level >= self.capacity


class EntryState(enum.Enum):
    HELD = "held"  # admitted, waiting here
    DISPATCHED = "dispatched"  # sent to the router, first token not yet back
    STREAMING = "streaming"  # first token back
    REFUSED = "refused"  # displaced while held
    DONE = "done"


@dataclass(eq=False, slots=True)
class Entry:
    """One admitted request."""

    seq: int
    tenant: str
    prompt_tokens: int
    reserved: int  # tokens taken from the tenant's bucket at admission
    arrival: float
    start: float  # SFQ tags, in prompt tokens / weight
    finish: float
    state: EntryState = EntryState.HELD
    generated: int = 0
    priority: int = PRIORITY_DEFAULT  # decided when it leaves (``fair_priority``)


@dataclass(slots=True)
class _Tenant:
    limits: TenantLimits
    bucket: TokenBucket | None
    in_flight: int = 0  # held + dispatched + streaming
    dispatched: int = 0  # awaiting their first token
    at_workers: int = 0  # prompt tokens of requests sent and not finished (SFQ's cost)
    last_finish: float = 0.0
    held: deque[Entry] = field(default_factory=deque)

    @property
    def occupancy(self) -> int:
        """What the tenant holds of the bounded queue."""
        return len(self.held) + self.dispatched


class Outcome(enum.Enum):
    HELD = "held"  # admitted (possibly dispatched at once: see the entry's state)
    REJECTED_IN_FLIGHT = "rejected_in_flight"
    REJECTED_TOKENS = "rejected_tokens"
    TOO_LARGE = "rejected_tokens_too_large"
    QUEUE_FULL = "queue_full"


@dataclass(frozen=True, slots=True)
class Admission:
    outcome: Outcome
    entry: Entry | None = None
    displaced: Entry | None = None  # a held request pushed out to make room
    retry_after_seconds: int = 0  # for REJECTED_TOKENS


def choose_victim(
    occupancy: Mapping[str, int],
    weights: Mapping[str, int],
    held: Mapping[str, int],
    newcomer: str,
    capacity: int,
) -> str | None:
    """Pure: whose newest held request makes room for ``newcomer`` in a full queue.

    Shares are ``capacity`` split by weight among the tenants in the queue and the
    newcomer. The newcomer displaces only while under its share, and only a tenant
    over its share with a held request is displaced: the one most over it (the
    highest occupancy per weight; ties to the name, for determinism)."""
    present = {t for t, n in occupancy.items() if n > 0} | {newcomer}
    total_weight = sum(weights[t] for t in present)

    def share(tenant: str) -> float:
        return capacity * weights[tenant] / total_weight

    if occupancy.get(newcomer, 0) >= share(newcomer):
        return None
    over = [
        t
        for t in present
        if t != newcomer and held.get(t, 0) > 0 and occupancy.get(t, 0) > share(t)
    ]
    if not over:
        return None
    return max(over, key=lambda t: (occupancy[t] / weights[t], t))


def fair_priority(at_workers: Mapping[str, int], weights: Mapping[str, int], tenant: str) -> int:
    """Pure: the engine priority of ``tenant``'s next request.

    ``at_workers``: the prompt tokens each tenant has sent and not finished;
    ``weights``: every tenant with requests admitted (``tenant`` included). The tenant is
    under its share when its tokens at the workers, per weight, are fewer than all of
    them per total weight. Not every tenant can be under (the shares add up to the
    total), and with one tenant, or none busy, nobody is: arrival order stands."""
    total = sum(at_workers.values())
    total_weight = sum(weights.values())
    mine = at_workers.get(tenant, 0)
    if mine * total_weight < total * weights[tenant]:
        return PRIORITY_UNDER_SHARE
    return PRIORITY_DEFAULT


class TenantScheduler:
    """The gate's decisions and bookkeeping (no I/O, no clock)."""

    def __init__(
        self, settings: TenancySettings, *, under_share_depth: int = DEFAULT_DISPATCH_DEPTH
    ) -> None:
        self.settings = settings
        # Past a full bound, how many requests a tenant under its share may have awaiting
        # their first token (module docstring).
        self.under_share_depth = under_share_depth
        self._tenants: dict[str, _Tenant] = {}
        self._seq = itertools.count()
        self._virtual = 0.0  # V: the start tag of the latest request dispatched
        self.held = 0
        self.dispatched = 0

    # --------------------------------------------------------------- views

    def tenant_in_flight(self, tenant: str) -> int:
        state = self._tenants.get(tenant)
        return state.in_flight if state is not None else 0

    def held_entries(self) -> list[Entry]:
        return [e for state in self._tenants.values() for e in state.held]

    # --------------------------------------------------------------- transitions

    def admit(
        self, tenant: str, prompt_tokens: int, max_tokens: int, *, now: float, capacity: int
    ) -> Admission:
        """Limits, then room in the queue (``capacity``: held + dispatched). An
        admitted request is held; ``release`` sends it on."""
        state = self._tenant(tenant, now)
        limits = state.limits
        refused = self.refusal(tenant, capacity=capacity)
        if refused is not None:
            return Admission(refused)
        reserve = 0
        bucket = state.bucket
        if bucket is not None:
            if prompt_tokens > bucket.capacity:
                return Admission(Outcome.TOO_LARGE)
            reserve = min(prompt_tokens + max_tokens, int(bucket.capacity))
            wait = bucket.seconds_until(reserve, now)
            if wait > 0:
                return Admission(
                    Outcome.REJECTED_TOKENS, retry_after_seconds=max(1, math.ceil(wait))
                )
        displaced = None
        if self.held + self.dispatched >= capacity:
            victim = self._victim(tenant, capacity)
            assert victim is not None  # refusal() returned QUEUE_FULL otherwise
            displaced = self._tenants[victim].held[-1]
            self._drop_held(displaced)
            displaced.state = EntryState.REFUSED
        if bucket is not None:
            bucket.level -= reserve
        start = max(self._virtual, state.last_finish)
        finish = start + _cost(prompt_tokens) / limits.weight
        entry = Entry(next(self._seq), tenant, prompt_tokens, reserve, now, start, finish)
        state.last_finish = finish
        state.in_flight += 1
        state.held.append(entry)
        self.held += 1
        return Admission(Outcome.HELD, entry, displaced)

    def refusal(self, tenant: str, *, capacity: int) -> Outcome | None:
        """What ``admit`` refuses whatever the prompt: the tenant's in-flight limit, or a
        full queue (``capacity``) that it may not displace into. The frontend asks before
        tokenizing, so that a tenant offering many times capacity does not spend the
        frontend's CPU on prompts that are refused anyway (a 4k-token prompt costs
        milliseconds of a core to render and encode, what the other tenants' requests
        need)."""
        state = self._tenants.get(tenant)
        cap = limits_for(tenant, self.settings).max_in_flight_requests
        if cap is not None and state is not None and state.in_flight >= cap:
            return Outcome.REJECTED_IN_FLIGHT
        if self.held + self.dispatched >= capacity and self._victim(tenant, capacity) is None:
            return Outcome.QUEUE_FULL
        return None

    def release(self, bound: int) -> list[Entry]:
        """Held requests to send now, in fair order, while fewer than ``bound`` await
        their first token; past that, the heads of tenants under their share with fewer
        than ``under_share_depth`` awaiting (module docstring). Each leaves ranked by
        ``fair_priority``."""
        out = []
        while self.held:
            heads = [s.held[0] for s in self._tenants.values() if s.held]
            if self.dispatched >= bound:
                heads = [
                    e
                    for e in heads
                    if self._tenants[e.tenant].dispatched < self.under_share_depth
                    and self._priority(e.tenant) == PRIORITY_UNDER_SHARE
                ]
            if not heads:
                break
            entry = min(heads, key=lambda e: (e.start, e.seq))
            entry.priority = self._priority(entry.tenant)
            state = self._tenants[entry.tenant]
            state.held.popleft()
            self.held -= 1
            state.dispatched += 1
            state.at_workers += _cost(entry.prompt_tokens)
            self.dispatched += 1
            entry.state = EntryState.DISPATCHED
            self._virtual = max(self._virtual, entry.start)
            out.append(entry)
        return out

    def first_token(self, entry: Entry) -> None:
        if entry.state is EntryState.DISPATCHED:
            self._tenants[entry.tenant].dispatched -= 1
            self.dispatched -= 1
            entry.state = EntryState.STREAMING

    def finish(self, entry: Entry, *, now: float) -> None:
        """The request is over, however it ended: settle its tokens and free its place.
        The prompt counts once its first token came back (a request refused or failed
        before that gets its whole reservation back)."""
        if entry.state is EntryState.DONE:
            return
        state = self._tenants[entry.tenant]
        served = entry.state is EntryState.STREAMING
        if entry.state is EntryState.HELD:
            self._drop_held(entry)
        elif entry.state is not EntryState.REFUSED:  # sent: dispatched or streaming
            state.at_workers -= _cost(entry.prompt_tokens)
            if entry.state is EntryState.DISPATCHED:
                state.dispatched -= 1
                self.dispatched -= 1
        entry.state = EntryState.DONE
        state.in_flight -= 1
        if state.bucket is not None:
            used = entry.prompt_tokens + entry.generated if served else 0
            state.bucket.refill(now)
            state.bucket.level = min(
                state.bucket.capacity, state.bucket.level + entry.reserved - used
            )
        self._forget_idle(entry.tenant, now)

    # --------------------------------------------------------------- helpers

    def _victim(self, tenant: str, capacity: int) -> str | None:
        weights = {t: s.limits.weight for t, s in self._tenants.items()}
        weights.setdefault(tenant, limits_for(tenant, self.settings).weight)
        return choose_victim(
            {t: s.occupancy for t, s in self._tenants.items()},
            weights,
            {t: len(s.held) for t, s in self._tenants.items()},
            tenant,
            capacity,
        )

    def _priority(self, tenant: str) -> int:
        return fair_priority(
            {t: s.at_workers for t, s in self._tenants.items()},
            {t: s.limits.weight for t, s in self._tenants.items() if s.in_flight},
            tenant,
        )

    def _tenant(self, tenant: str, now: float) -> _Tenant:
        state = self._tenants.get(tenant)
        if state is None:
            limits = limits_for(tenant, self.settings)
            bucket = None
            if limits.tokens_per_minute is not None:
                bucket = TokenBucket.per_minute(limits.tokens_per_minute, now)
            state = self._tenants[tenant] = _Tenant(limits, bucket)
        return state

    def _drop_held(self, entry: Entry) -> None:
        state = self._tenants[entry.tenant]
        if state.held and state.held[-1] is entry:
            state.held.pop()
            # Its tags were the tenant's latest: the next request takes them back.
            state.last_finish = entry.start
        else:
            state.held.remove(entry)
        self.held -= 1

    def _forget_idle(self, tenant: str, now: float) -> None:
        """Drop a tenant with nothing in flight, a full bucket and no credit left to
        carry (a fresh state would be the same), so state stays bounded by activity."""
        state = self._tenants[tenant]
        if state.in_flight or state.last_finish > self._virtual:
            return
        if state.bucket is not None and not state.bucket.full(now):
            return
        del self._tenants[tenant]


def _cost(prompt_tokens: int) -> int:
    """What a request costs its tenant in the fair order: its prompt tokens (at least 1)."""
    return max(1, prompt_tokens)


# ---------------------------------------------------------------------- the shell


class GateBackend(Protocol):
    """What the gate needs from the router (``tandem.router.service.Router``)."""

    @property
    def config(self) -> RouterConfig: ...

    @property
    def draining(self) -> bool: ...

    def workers(self) -> list[WorkerView]: ...

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]: ...

    async def wait_round(self, timeout_s: float) -> None: ...

    def count_queued(self, source: Callable[[], Mapping[str, tuple[int, int]]]) -> None: ...


def dispatch_bound(workers: Sequence[WorkerView], depth: int, max_queued: int) -> int:
    """Pure: how many requests may await their first token at the router."""
    ready = sum(1 for w in workers if w.healthy and not w.draining)
    return min(max_queued, depth * max(1, ready))


def held_demand(
    entries: Sequence[Entry], workers: Sequence[WorkerView], min_prefill_tokens: int
) -> dict[str, tuple[int, int]]:
    """Pure: held requests as (requests, prompt tokens) by the pool they will wait on:
    long prompts on the prefill pool when there is one, the rest on the decode pool."""
    has_prefill = any(w.role == "prefill" for w in workers)
    out = {"prefill": (0, 0), "decode": (0, 0)}
    for entry in entries:
        pool = "prefill" if has_prefill and entry.prompt_tokens >= min_prefill_tokens else "decode"
        requests, tokens = out[pool]
        out[pool] = (requests + 1, tokens + entry.prompt_tokens)
    return out


class TenantGate:
    """Streams requests through the tenant limits and the fair queue to ``backend``."""

    def __init__(
        self,
        backend: GateBackend,
        settings: TenancySettings,
        metrics: TenantMetrics,
        *,
        dispatch_depth: int = DEFAULT_DISPATCH_DEPTH,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._backend = backend
        self._scheduler = TenantScheduler(settings, under_share_depth=dispatch_depth)
        self._metrics = metrics
        self._clock = clock
        self.dispatch_depth = dispatch_depth
        self._waiters: dict[Entry, asyncio.Future[None]] = {}
        self._pump_task: asyncio.Task[None] | None = None
        backend.count_queued(self.held_demand)

    @property
    def settings(self) -> TenancySettings:
        return self._scheduler.settings

    @property
    def held(self) -> int:
        return self._scheduler.held

    @property
    def dispatched(self) -> int:
        return self._scheduler.dispatched

    def held_demand(self) -> dict[str, tuple[int, int]]:
        entries = self._scheduler.held_entries()
        if not entries:
            return {}
        min_prefill = self._backend.config.policy.min_prefill_tokens
        return held_demand(entries, self._backend.workers(), min_prefill)

    async def generate(
        self, tenant: str, request: GenerationRequest
    ) -> AsyncGenerator[GenerationChunk, None]:
        """The router's chunks for ``request`` once the gate lets it through; refusals
        raise before the first chunk, as the router's own do."""
        label = tenant_label(tenant, self.settings)
        entry = self._admit(tenant, request)
        try:
            held_seconds = 0.0
            if entry.state is EntryState.HELD:
                with TRACER.start_as_current_span(
                    "frontend.queue", attributes={"tandem.tenant": label}
                ):
                    await self._wait(entry, label)
                held_seconds = self._clock() - entry.arrival
            self._metrics.requests.labels(label, "admitted").inc()
            self._metrics.held_seconds.labels(label).observe(held_seconds)
            ranked = replace(request.sampling, priority=entry.priority)
            stream = self._backend.generate(replace(request, sampling=ranked))
            try:
                async for chunk in stream:
                    if entry.state is EntryState.DISPATCHED:
                        self._scheduler.first_token(entry)
                        self._metrics.tokens.labels(label, "prompt").inc(entry.prompt_tokens)
                        self._pump()
                    entry.generated += len(chunk.token_ids)
                    self._metrics.tokens.labels(label, "generated").inc(len(chunk.token_ids))
                    if chunk.route is not None:  # the first chunk: its TTFT breakdown
                        chunk = replace(
                            chunk, route=replace(chunk.route, queue_seconds=held_seconds)
                        )
                    yield chunk
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()
        finally:
            self._scheduler.finish(entry, now=self._clock())
            self._pump()

    # ------------------------------------------------------------------ admission

    def refuse_early(self, tenant: str) -> None:
        """Raises what ``generate`` would for ``tenant`` whatever its prompt (its
        in-flight limit, a full queue): called before the prompt is tokenized
        (``TenantScheduler.refusal``)."""
        config = self._backend.config
        outcome = self._scheduler.refusal(tenant, capacity=config.max_queued_requests)
        if outcome is not None:
            self._raise_refusal(tenant, Admission(outcome), prompt_tokens=0)

    def _admit(self, tenant: str, request: GenerationRequest) -> Entry:
        config = self._backend.config
        admission = self._scheduler.admit(
            tenant,
            len(request.prompt),
            request.sampling.max_tokens,
            now=self._clock(),
            capacity=config.max_queued_requests,
        )
        if admission.outcome is not Outcome.HELD:
            self._raise_refusal(tenant, admission, prompt_tokens=len(request.prompt))
        assert admission.entry is not None
        if admission.displaced is not None:
            self._refuse(admission.displaced, config)
        self._pump()
        return admission.entry

    def _raise_refusal(self, tenant: str, admission: Admission, *, prompt_tokens: int) -> NoReturn:
        """Counts the refusal and raises its OpenAI-shaped error."""
        config = self._backend.config
        limits = limits_for(tenant, self.settings)
        outcome = admission.outcome
        metric = "rejected_tokens" if outcome is Outcome.TOO_LARGE else outcome.value
        self._metrics.requests.labels(tenant_label(tenant, self.settings), metric).inc()
        if outcome is Outcome.REJECTED_IN_FLIGHT:
            raise TenantRequestLimitError(
                f"Rate limit reached for tenant {tenant!r}: at most "
                f"{limits.max_in_flight_requests} requests in flight; retry when one ends.",
                retry_after_seconds=config.retry_after_seconds,
            )
        if outcome is Outcome.REJECTED_TOKENS:
            raise TenantTokenLimitError(
                f"Rate limit reached for tenant {tenant!r} on tokens per minute: limit "
                f"{limits.tokens_per_minute}; this request reserves its prompt plus "
                f"max_tokens. Retry in {admission.retry_after_seconds}s.",
                retry_after_seconds=admission.retry_after_seconds,
            )
        if outcome is Outcome.TOO_LARGE:
            raise TenantRequestTooLargeError(
                f"Request too large for tenant {tenant!r} on tokens per minute: limit "
                f"{limits.tokens_per_minute}, the prompt alone has {prompt_tokens} "
                "tokens. Shorten the prompt."
            )
        raise _queue_full(config, self._scheduler)

    def _refuse(self, entry: Entry, config: RouterConfig) -> None:
        waiter = self._waiters.pop(entry, None)
        label = tenant_label(entry.tenant, self.settings)
        self._metrics.requests.labels(label, "displaced").inc()
        if waiter is not None and not waiter.done():
            waiter.set_exception(_queue_full(config, self._scheduler))

    async def _wait(self, entry: Entry, label: str) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters[entry] = waiter
        self._metrics.held.labels(label).inc()
        self._ensure_pump()
        try:
            await waiter
        except asyncio.CancelledError:
            # Left before reaching the router (released or not): the request ends here.
            self._metrics.requests.labels(label, "cancelled").inc()
            raise
        finally:
            self._waiters.pop(entry, None)
            self._metrics.held.labels(label).dec()

    # ------------------------------------------------------------------ release

    def _pump(self) -> None:
        """Send held requests on while there is room (everything while draining: the
        router refuses them with its 503)."""
        if not self._scheduler.held:
            self._stop_rounds()
            return
        config = self._backend.config
        if self._backend.draining:
            bound = self._scheduler.held + self._scheduler.dispatched
        else:
            bound = dispatch_bound(
                self._backend.workers(), self.dispatch_depth, config.max_queued_requests
            )
        for entry in self._scheduler.release(bound):
            waiter = self._waiters.get(entry)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        if not self._scheduler.held:
            self._stop_rounds()

    def _ensure_pump(self) -> None:
        """Re-check the bound after each health round while anything is held: workers
        may have become ready (or the router started draining)."""
        if self._pump_task is None or self._pump_task.done():
            self._pump_task = asyncio.create_task(self._pump_rounds())

    def _stop_rounds(self) -> None:
        task = self._pump_task
        if task is not None and task is not asyncio.current_task():
            task.cancel()  # nothing held: nothing to wait for
            self._pump_task = None

    async def _pump_rounds(self) -> None:
        while self._scheduler.held:
            await self._backend.wait_round(self._backend.config.health_interval_seconds)
            self._pump()


def _queue_full(config: RouterConfig, scheduler: TenantScheduler) -> OverloadedError:
    queued = scheduler.held + scheduler.dispatched
    return OverloadedError(
        f"the server is at capacity ({queued} requests queued); retry shortly",
        retry_after_seconds=config.retry_after_seconds,
    )
