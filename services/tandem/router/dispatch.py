"""One request's journey through the workers: route, prefill, decode, retry.

- a failed remote prefill moves to another prefill worker, then to local prefill;
- a decode failure before the first token retries on another decode worker (reusing
  the prefilled KV when the failure was the decode worker's, prefilling locally
  otherwise);
- a decode failure after it (the worker died, was drained past its deadline, stalled)
  *migrates* the stream, up to ``max_migrations`` times: the request goes on as a new one
  whose prompt is the original prompt plus every token already sent, for the tokens still
  owed, on another decode worker (routed and prefilled like any request). The client sees
  one stream with no token repeated or missing; greedy output is the uninterrupted run's,
  token for token (a sampled one goes on from the same text, with new draws). Past the
  limit the stream ends with an error;
- no decode worker at all (the pool scaled to zero, or every worker starting) makes a
  request wait for one, bounded by ``cold_start_wait_seconds`` (``cold_start``), instead
  of failing;
- closing the generator (client gone) cancels the worker stream and releases any KV
  still parked on a prefill worker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Mapping,
)
from dataclasses import dataclass, field, replace

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from tandem.api.v1alpha1 import RoutingPolicy
from tandem.engines.base import FinishReason
from tandem.errors import TandemError
from tandem.kv.events import Tier
from tandem.router.cold_start import NoWorkerStartedError, WorkerWait, decide_worker_wait
from tandem.router.errors import (
    GenerationFailedError,
    NoWorkerAvailableError,
    OverloadedError,
    WorkerRejectedError,
)
from tandem.router.kv_index import KvIndex
from tandem.router.messages import GenerationChunk, GenerationRequest, RouteInfo, RouterConfig
from tandem.router.metrics import RouterMetrics
from tandem.router.onboarding import measured_tier_weights, saved_tokens
from tandem.router.policy import (
    DecisionReason,
    PolicyConfig,
    PrefillPath,
    RouteDecision,
    RouteRequest,
    WorkerRole,
    choose_prefill_worker,
    choose_route,
    digests_match,
)
from tandem.router.ports import (
    DecodeChunk,
    PrefillReply,
    WorkerCallError,
    WorkerErrorKind,
    call_error,
    classify,
    classify_handoff_failure,
)
from tandem.router.prefill_rate import update_prefill_rate
from tandem.router.workers import WorkerState, WorkerTable
from tandem.telemetry.tracing import TRACER

logger = logging.getLogger(__name__)

Spawn = Callable[[Coroutine[object, object, None]], object]


class _LostMidStream(Exception):
    """A decode stream failed after its first token; ``worker`` served it."""

    def __init__(self, worker: str, message: str) -> None:
        super().__init__(message)
        self.worker = worker


@dataclass(slots=True)
class _Attempts:
    """What one request has tried so far."""

    failed_decode: set[str] = field(default_factory=set)
    failed_prefill: set[str] = field(default_factory=set)
    handoff: PrefillReply | None = None
    prefill_worker: str | None = None
    kv_pulled: bool = False  # a decode worker took the handoff (and releases it)
    remote_reason: DecisionReason | None = None
    last_failure: WorkerErrorKind | None = None  # of the latest decode attempt
    local_reason: DecisionReason | None = None  # overrides the policy's after a fallback
    cached: dict[str, int] | None = None  # prompt tokens each worker caches (looked up once)
    # Time to first token so far, by phase (RouteInfo's breakdown).
    route_seconds: float = 0.0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0


# Local prefills for these reasons are work the prefill pool should have taken.
_DIVERTING_REASONS = frozenset(
    {
        DecisionReason.NO_PREFILL_WORKERS,
        DecisionReason.PREFILL_UNHEALTHY,
        DecisionReason.PREFILL_SATURATED,
        DecisionReason.PREFILL_INCOMPATIBLE,
        DecisionReason.PREFILL_FAILED,
    }
)


def _diverted_tokens(
    decision: RouteDecision, route_request: RouteRequest, policy: PolicyConfig
) -> int:
    """Prompt tokens prefilled locally only because the prefill pool could not take them."""
    if decision.path is not PrefillPath.LOCAL or decision.reason not in _DIVERTING_REASONS:
        return 0
    if route_request.prompt_tokens < policy.min_prefill_tokens:
        return 0  # short prompts prefill locally anyway
    return route_request.prompt_tokens


class Dispatcher:
    def __init__(
        self,
        config: RouterConfig,
        table: WorkerTable,
        metrics: RouterMetrics,
        *,
        mark_failed: Callable[[WorkerState, WorkerCallError], None],
        spawn: Spawn,
        clock: Callable[[], float],
        index: KvIndex,
        await_round: Callable[[float], Awaitable[bool]] | None = None,
        next_round: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        self.config = config
        self._table = table
        self._metrics = metrics
        self._mark_failed = mark_failed
        self._spawn = spawn  # runs a background task the router owns (or drops it)
        self._clock = clock
        self.index = index  # what each worker caches, from its KV events
        # A fresh health round while the worker set settles (membership adopted, new
        # workers checked); False: nothing is changing. None: never wait.
        self._await_round = await_round
        # The next health round, whatever is changing (at most the given seconds): a
        # prompt waiting for a starting prefill worker looks again after each. None: no
        # rounds run, so no prompt waits.
        self._next_round = next_round
        self._turn = 0
        # Requests waiting for a decode worker to start, and their prompt tokens.
        self._waiting = (0, 0)

    def waiting_demand(self) -> dict[str, tuple[int, int]]:
        """Requests waiting for a decode worker to start, as (requests, prompt tokens)
        by pool: decode demand the autoscaler must see while the pool is empty."""
        return {"decode": self._waiting} if self._waiting[0] else {}

    def forget_worker(self, key: str, incarnation: str | None) -> None:
        """``key`` left (``incarnation`` None) or restarted as ``incarnation``."""
        self.index.remove(key, unless_incarnation=incarnation)

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[GenerationChunk, None]:
        """One admitted request: route, prefill, decode, with retries and migrations (see
        module doc)."""
        sent: list[int] = []
        attempt, lost, why = request, None, ""
        # The caller's span (the frontend's request) parents every span of this request,
        # also those of a migration, which starts while the caller is between chunks.
        parent = otel_context.get_current()
        for migration in range(self.config.max_migrations + 1):
            try:
                async for chunk in self._serve(attempt, parent, lost_worker=lost):
                    sent.extend(chunk.token_ids)
                    # The route is the first chunk's: a migrated stream goes on unannounced.
                    yield chunk if lost is None else replace(chunk, route=None)
                return
            except _LostMidStream as exc:
                owed = request.sampling.max_tokens - len(sent)
                if migration == self.config.max_migrations or owed <= 0:
                    self._metrics.migrations.labels("exhausted").inc()
                    raise GenerationFailedError(f"{exc} ({migration} migrations)") from exc
                self._metrics.migrations.labels("resumed").inc()
                logger.info(
                    "%s: migrating after %d tokens (%s)", request.request_id, len(sent), exc
                )
                lost, why = exc.worker, str(exc)
                attempt = GenerationRequest(
                    f"{request.request_id}.m{migration + 1}",
                    (*request.prompt, *sent),
                    replace(request.sampling, max_tokens=owed),
                )
            except TandemError as exc:
                if lost is None:
                    raise  # before any token: the client gets its status
                # The stream had started: the client can only be told it ended.
                self._metrics.migrations.labels("failed").inc()
                raise GenerationFailedError(
                    f"{why}; resuming it on another decode worker failed: {exc.message}"
                ) from exc

    async def _serve(
        self, request: GenerationRequest, parent: Context, *, lost_worker: str | None
    ) -> AsyncGenerator[GenerationChunk, None]:
        """One attempt at ``request``: route, prefill, decode, with retries before the
        first token; :class:`_LostMidStream` after it. ``lost_worker``: a decode worker
        this request's stream was just lost on, not to be tried again. ``parent``: the
        trace context its spans belong to."""
        attempts = _Attempts()
        if lost_worker is not None:
            attempts.failed_decode.add(lost_worker)
        try:
            cfg = self.config
            route_request = self._route_request(request)
            if route_request.prompt_tokens >= cfg.policy.min_prefill_tokens:
                # Demand for the prefill pool, whichever path the prompt takes.
                self._metrics.prefill_prompt_tokens.inc(route_request.prompt_tokens)
            for attempt in range(cfg.max_decode_attempts):
                if attempt:
                    self._metrics.retries.labels("decode").inc()
                decision = await self._decide(request, route_request, attempts, parent)
                handoff = attempts.handoff
                if handoff is not None and handoff.finish_reason is not None:
                    # The prefill's first token already ended the sequence.
                    self._metrics.prefill_decisions.labels(
                        decision.path.value, decision.reason.value
                    ).inc()
                    yield GenerationChunk(
                        (handoff.first_token,),
                        handoff.finish_reason.value,
                        self._route_info(decision, attempts, None),
                    )
                    return
                worker = self._table.get(decision.decode)
                if worker is None:
                    attempts.failed_decode.add(decision.decode)
                    continue
                # Spans the whole stream, so it is started and ended by hand: a context
                # attached here would leak into the caller at every yield.
                span = _decode_span(request, decision, worker, parent)
                stream = worker.client.decode(
                    request.request_id,
                    request.prompt,
                    request.sampling,
                    remote_kv=handoff.kv if handoff is not None else None,
                    first_token=handoff.first_token if handoff is not None else None,
                    timeout_s=self._stream_deadline(request),
                )
                # Long prompts prefilling here although the prefill pool should take them:
                # demand the autoscaler must see while that pool is empty or saturated.
                diverted = _diverted_tokens(decision, route_request, cfg.policy)
                self._metrics.diverted_prefill_tokens.inc(diverted)
                if diverted:
                    self._metrics.diverted_prompts.inc()
                called = self._clock()
                try:
                    # Current while the call starts, so its metadata carries the span.
                    with trace.use_span(span, end_on_exit=False):
                        first = await self._first_chunk(
                            request, worker, stream, route_request, attempts
                        )
                except BaseException:
                    span.end()  # use_span recorded the error
                    raise
                finally:
                    self._metrics.diverted_prefill_tokens.dec(diverted)
                    attempts.decode_seconds += self._clock() - called
                if first is None:
                    span.set_status(Status(StatusCode.ERROR, "failed before its first token"))
                    span.end()
                    continue
                attempts.kv_pulled = handoff is not None
                self._record_route(decision, first, route_request, attempts)
                worker.active_sequences += 1
                try:
                    yield GenerationChunk(
                        first.token_ids,
                        _reason(first.finish_reason),
                        self._route_info(decision, attempts, first),
                    )
                    finished = first.finish_reason is not None
                    while not finished:
                        chunk = await self._next_chunk(worker, stream)
                        finished = chunk.finish_reason is not None
                        yield GenerationChunk(chunk.token_ids, _reason(chunk.finish_reason))
                except _LostMidStream as exc:
                    span.set_status(Status(StatusCode.ERROR, str(exc)))
                    raise
                finally:
                    worker.active_sequences -= 1
                    span.end()
                    await _close(stream)
                return
            raise self._exhausted(attempts)
        finally:
            if (
                attempts.handoff is not None
                and attempts.handoff.kv is not None
                and (not attempts.kv_pulled)
            ):
                # Free the parked KV now instead of waiting for its lease to expire.
                self._release_later(attempts.prefill_worker, request.request_id)

    def _exhausted(self, attempts: _Attempts) -> TandemError:
        """The error for a request every decode attempt failed: busy workers are
        backpressure (429), anything else a failure (503)."""
        if attempts.last_failure is WorkerErrorKind.CAPACITY:
            self._metrics.rejected.labels("workers_busy").inc()
            return OverloadedError(
                "every decode worker is at capacity; retry shortly",
                retry_after_seconds=self.config.retry_after_seconds,
            )
        return GenerationFailedError(
            f"no worker could serve the request ({len(attempts.failed_decode)} tried)"
        )

    def _stream_deadline(self, request: GenerationRequest) -> float:
        """A whole decode stream's deadline: first token, then a budget per token."""
        cfg = self.config
        per_token = cfg.max_seconds_per_token * request.sampling.max_tokens
        return cfg.first_token_timeout_seconds + per_token

    def _route_request(self, request: GenerationRequest) -> RouteRequest:
        return RouteRequest(len(request.prompt), request.sampling.max_tokens)

    def _cached_tokens(self, request: GenerationRequest, policy: PolicyConfig) -> dict[str, int]:
        """Prompt tokens each worker would not have to compute, its offload tiers' tokens
        discounted by what onboarding them costs."""
        if policy.routing is not RoutingPolicy.KV_AWARE:
            return {}
        return {
            address: saved_tokens(held, self._tier_weights(address, policy))
            for address, held in self.index.cached_by_tier(request.prompt).items()
        }

    def _tier_weights(self, address: str, policy: PolicyConfig) -> Mapping[Tier, float]:
        """The worker's tier weights from what it last reported measuring."""
        worker = self._table.get(address)
        if worker is None:
            return policy.tier_weights
        stats = worker.stats
        return measured_tier_weights(
            stats.prefill_seconds_per_token, stats.onboard_seconds_per_token, policy.tier_weights
        )

    async def _decide(
        self,
        request: GenerationRequest,
        route_request: RouteRequest,
        attempts: _Attempts,
        parent: Context,
    ) -> RouteDecision:
        started = self._clock()
        with TRACER.start_as_current_span("router.route", context=parent) as span:
            decision = await self._choose_waiting(request, route_request, attempts)
            _describe_decision(span, decision, route_request, attempts)
        attempts.route_seconds += self._clock() - started
        if decision.path is PrefillPath.REMOTE and decision.prefill is not None:
            if attempts.handoff is not None:
                return decision  # the KV already prefilled for this request
            handoff = await self._prefill(request, route_request, decision, attempts, parent)
            if handoff is not None:
                attempts.remote_reason = decision.reason
                return RouteDecision(
                    decision.decode, attempts.prefill_worker, PrefillPath.REMOTE, decision.reason
                )
            attempts.local_reason = DecisionReason.PREFILL_FAILED
        return RouteDecision(
            decision.decode, None, PrefillPath.LOCAL, attempts.local_reason or decision.reason
        )

    async def _choose_waiting(
        self, request: GenerationRequest, route_request: RouteRequest, attempts: _Attempts
    ) -> RouteDecision:
        """The policy's decision, waiting for workers while the worker set settles or a
        prefill worker starts; REMOTE with this request's prefill worker once it holds
        a handoff."""
        policy = self.config.policy
        cached = attempts.cached
        if cached is None:
            cached = attempts.cached = self._cached_tokens(request, policy)
        decision = self._choose(route_request, cached, attempts)
        deadline = self._clock() + self.config.worker_wait_seconds
        while decision is None and self._await_round is not None:
            # The worker set may be changing (a pod replaced, a rollout): while it
            # settles, look again after each fresh health round, until time is up.
            left = deadline - self._clock()
            if left <= 0 or not await self._await_round(left):
                break
            decision = self._choose(route_request, cached, attempts)
        if decision is None and not attempts.failed_decode:
            decision = await self._wait_for_decode_worker(route_request, cached, attempts)
        if decision is not None and decision.path is PrefillPath.WAIT:
            decision = await self._wait_for_prefill(route_request, cached, attempts)
        if decision is None:
            if attempts.failed_decode:
                raise self._exhausted(attempts)
            self._metrics.rejected.labels("no_worker").inc()
            raise NoWorkerAvailableError("no healthy decode worker is available; retry shortly")
        handoff = attempts.handoff
        if handoff is not None and handoff.kv is not None:
            decode = self._table.get(decision.decode)
            decode_digest = decode.snapshot().config_digest if decode is not None else ""
            if digests_match(handoff.kv.config_digest, decode_digest):
                # Reuse the KV already prefilled for this request.
                return RouteDecision(
                    decision.decode,
                    attempts.prefill_worker,
                    PrefillPath.REMOTE,
                    attempts.remote_reason or decision.reason,
                )
            # A retry's decode worker runs another engine config than the prefill worker
            # holding this request's KV (mid-rollout, the first choice went away): it
            # would refuse the KV. Give it up and take the route chosen for this worker.
            self._release_later(attempts.prefill_worker, request.request_id)
            attempts.handoff = attempts.prefill_worker = None
        return decision

    async def _wait_for_decode_worker(
        self, route_request: RouteRequest, cached: Mapping[str, int], attempts: _Attempts
    ) -> RouteDecision | None:
        """Hold a request that found no decode worker while one starts (scale from zero),
        looking again after each health round, up to ``cold_start_wait_seconds``: its
        route once a worker is ready, :class:`NoWorkerStartedError` past the bound. None
        at once where the cluster never waits (its decode pool keeps a worker)."""
        limit = self.config.cold_start_wait_seconds
        if limit <= 0 or self._next_round is None:
            return None
        since = self._clock()
        requests, tokens = self._waiting
        self._waiting = (requests + 1, tokens + route_request.prompt_tokens)
        self._metrics.waiting_for_worker.inc()
        outcome = "cancelled"  # unless the loop ends: the client left while waiting
        try:
            while True:
                decision = self._choose(route_request, cached, attempts)
                waited = self._clock() - since
                step = decide_worker_wait(
                    found=decision is not None, waited_seconds=waited, limit_seconds=limit
                )
                if step is not WorkerWait.WAITING:
                    outcome = step.value
                    break
                await self._next_round(limit - waited)
        finally:
            requests, tokens = self._waiting
            self._waiting = (requests - 1, tokens - route_request.prompt_tokens)
            self._metrics.waiting_for_worker.dec()
            self._metrics.cold_start_waits.labels(outcome).observe(self._clock() - since)
        if step is WorkerWait.TIMED_OUT:
            self._metrics.rejected.labels("no_worker_started").inc()
            raise NoWorkerStartedError(limit, retry_after_seconds=self.config.retry_after_seconds)
        return decision

    async def _wait_for_prefill(
        self, route_request: RouteRequest, cached: Mapping[str, int], attempts: _Attempts
    ) -> RouteDecision | None:
        """Hold a long prompt while a prefill worker starts (the policy said WAIT),
        looking again after each health round until it routes elsewhere: remote once a
        prefill worker is ready, local once the wait limit has passed. Its tokens count
        as prefill demand the pool does not hold meanwhile."""
        limit = self.config.policy.max_prefill_start_wait_seconds or 0.0
        since = self._clock()
        self._metrics.diverted_prefill_tokens.inc(route_request.prompt_tokens)
        try:
            while True:
                left = limit - (self._clock() - since)
                if self._next_round is not None and left > 0:
                    await self._next_round(left)
                waited = self._clock() - since
                decision = self._choose(route_request, cached, attempts, waited_seconds=waited)
                if decision is None or decision.path is not PrefillPath.WAIT:
                    break
        finally:
            self._metrics.diverted_prefill_tokens.dec(route_request.prompt_tokens)
        if decision is None:
            return None
        path = "remote" if decision.path is PrefillPath.REMOTE else "local"
        self._metrics.prefill_start_waits.labels(path).observe(self._clock() - since)
        return decision

    def _choose(
        self,
        route_request: RouteRequest,
        cached: Mapping[str, int],
        attempts: _Attempts,
        *,
        waited_seconds: float = 0.0,
    ) -> RouteDecision | None:
        self._turn += 1
        # Without health rounds nothing would tell a waiting prompt a worker is ready.
        starting = self._table.starting(WorkerRole.PREFILL) if self._next_round else 0
        return choose_route(
            self._table.snapshots(),
            route_request,
            cached,
            self.config.policy,
            turn=self._turn,
            failed_decode=attempts.failed_decode,
            failed_prefill=attempts.failed_prefill,
            prefill_starting=starting,
            waited_seconds=waited_seconds,
        )

    async def _prefill(
        self,
        request: GenerationRequest,
        route_request: RouteRequest,
        decision: RouteDecision,
        attempts: _Attempts,
        parent: Context,
    ) -> PrefillReply | None:
        """Remote prefill with retries on other prefill workers; None -> prefill locally.

        A prompt sent to a saturated pool because its decode worker is busy
        (``decode_busy``) is retried on saturated workers too: that worker is no less busy
        after the failure."""
        cfg = self.config
        key, decode_key = decision.prefill, decision.decode
        decode = self._table.get(decode_key)
        decode_digest = decode.snapshot().config_digest if decode is not None else ""
        for attempt in range(cfg.max_prefill_attempts):
            if attempt:
                self._metrics.retries.labels("prefill").inc()
                chosen = choose_prefill_worker(
                    self._table.snapshots(),
                    route_request,
                    attempts.cached or {},
                    cfg.policy,
                    decode_digest=decode_digest,
                    exclude=attempts.failed_prefill | {decode_key},
                    include_saturated=decision.reason is DecisionReason.DECODE_BUSY,
                )
                key = chosen.key if chosen is not None else None
            worker = self._table.get(key) if key is not None else None
            if worker is None:
                return None
            ahead = worker.snapshot().queued_prefill_tokens
            worker.pending_requests += 1
            worker.pending_tokens += route_request.prompt_tokens
            started = self._clock()
            done = False
            span = TRACER.start_span(
                "router.prefill",
                context=parent,
                kind=SpanKind.CLIENT,
                attributes={
                    "tandem.request_id": request.request_id,
                    "tandem.prefill_worker": worker.key,
                    "tandem.prompt_tokens": route_request.prompt_tokens,
                    "tandem.attempt": attempt,
                },
            )
            try:
                with trace.use_span(span, end_on_exit=True):
                    handoff = await worker.client.prefill(
                        request.request_id,
                        request.prompt,
                        request.sampling,
                        timeout_s=cfg.prefill_timeout_seconds,
                    )
                done = True
            except WorkerCallError as exc:
                done = True
                kind = classify(exc)
                self._metrics.worker_errors.labels("prefill", kind.value).inc()
                if kind is WorkerErrorKind.INVALID:
                    raise WorkerRejectedError(exc.message) from exc
                if kind is WorkerErrorKind.UNAVAILABLE:
                    self._mark_failed(worker, exc)
                logger.warning(
                    "request %s: prefill on %s failed: %s",
                    request.request_id,
                    worker.key,
                    exc.message,
                )
                attempts.failed_prefill.add(worker.key)
                continue
            finally:
                attempts.prefill_seconds += self._clock() - started
                worker.pending_requests -= 1
                worker.pending_tokens -= route_request.prompt_tokens
                if not done:  # cancelled mid-call: the worker may still finish it
                    self._release_later(worker.key, request.request_id)
            elapsed = self._clock() - started
            self._metrics.prefill_seconds.observe(elapsed)
            worker.prefill_tokens_per_second = update_prefill_rate(
                worker.prefill_tokens_per_second, ahead + route_request.prompt_tokens, elapsed
            )
            attempts.handoff = handoff
            attempts.prefill_worker = worker.key
            return handoff
        return None

    async def _first_chunk(
        self,
        request: GenerationRequest,
        worker: WorkerState,
        stream: AsyncIterator[DecodeChunk],
        route_request: RouteRequest,
        attempts: _Attempts,
    ) -> DecodeChunk | None:
        """The decode stream's first chunk, or None after a retryable failure."""
        local_tokens = route_request.prompt_tokens if attempts.handoff is None else 0
        worker.pending_requests += 1
        worker.pending_tokens += local_tokens
        try:
            async with asyncio.timeout(self.config.first_token_timeout_seconds):
                return await anext(stream)
        except StopAsyncIteration:
            exc = call_error(worker.key, WorkerErrorKind.INTERNAL, "stream ended without tokens")
        except TimeoutError:
            exc = call_error(worker.key, WorkerErrorKind.TIMEOUT, "no first token in time")
        except WorkerCallError as failed:
            exc = failed
        finally:
            worker.pending_requests -= 1
            worker.pending_tokens -= local_tokens
        await _close(stream)
        kind = classify(exc)
        attempts.last_failure = kind
        self._metrics.worker_errors.labels("decode", kind.value).inc()
        logger.warning("decode on %s failed before its first token: %s", worker.key, exc.message)
        if kind is WorkerErrorKind.INVALID:
            raise WorkerRejectedError(exc.message) from exc
        if kind is WorkerErrorKind.UNAVAILABLE:
            # The decode worker itself is gone; the parked KV is still good elsewhere.
            self._mark_failed(worker, exc)
            attempts.failed_decode.add(worker.key)
        elif kind is WorkerErrorKind.CAPACITY or attempts.handoff is None:
            attempts.failed_decode.add(worker.key)
        else:
            # KV_HANDOFF, or a failure while a handoff was pending (prefill peer gone,
            # transfer timeout): the decode worker is fine, the parked KV is not.
            self._metrics.kv_handoff_failures.labels(classify_handoff_failure(exc).value).inc()
            self._release_later(attempts.prefill_worker, request.request_id)
            if attempts.prefill_worker is not None:
                attempts.failed_prefill.add(attempts.prefill_worker)
            attempts.handoff = None
            attempts.prefill_worker = None
        return None

    async def _next_chunk(
        self, worker: WorkerState, stream: AsyncIterator[DecodeChunk]
    ) -> DecodeChunk:
        try:
            async with asyncio.timeout(self.config.stall_timeout_seconds):
                return await anext(stream)
        except StopAsyncIteration:
            exc = call_error(worker.key, WorkerErrorKind.INTERNAL, "stream ended unfinished")
        except TimeoutError:
            exc = call_error(worker.key, WorkerErrorKind.TIMEOUT, "decode stream stalled")
        except WorkerCallError as failed:
            exc = failed
        kind = classify(exc)
        self._metrics.worker_errors.labels("decode", kind.value).inc()
        logger.warning("decode on %s failed mid-stream: %s", worker.key, exc.message)
        if kind is WorkerErrorKind.UNAVAILABLE:
            self._mark_failed(worker, exc)
        raise _LostMidStream(worker.key, f"generation failed mid-stream ({kind.value})") from exc

    def _route_info(
        self, decision: RouteDecision, attempts: _Attempts, first: DecodeChunk | None
    ) -> RouteInfo:
        kv_seconds = first.kv_transfer_seconds if first is not None else 0.0
        return RouteInfo(
            path=decision.path,
            reason=decision.reason,
            decode_worker=decision.decode,
            prefill_worker=attempts.prefill_worker if decision.path is PrefillPath.REMOTE else None,
            kv_bytes=first.kv_bytes_transferred if first is not None else 0,
            kv_seconds=kv_seconds,
            route_seconds=attempts.route_seconds,
            prefill_seconds=attempts.prefill_seconds,
            first_token_seconds=max(0.0, attempts.decode_seconds - kv_seconds),
        )

    def _record_route(
        self,
        decision: RouteDecision,
        first: DecodeChunk,
        route_request: RouteRequest,
        attempts: _Attempts,
    ) -> None:
        m = self._metrics
        m.prefill_decisions.labels(decision.path.value, decision.reason.value).inc()
        if first.kv_bytes_transferred:
            m.kv_transfer_bytes.inc(first.kv_bytes_transferred)
            m.kv_transfer_seconds.observe(first.kv_transfer_seconds)
        cached = (attempts.cached or {}).get(decision.decode, 0)
        m.cached_prompt_tokens.inc(min(cached, route_request.prompt_tokens))

    def _release_later(self, worker_key: str | None, request_id: str) -> None:
        if worker_key is None:
            return
        worker = self._table.get(worker_key)
        if worker is not None:
            self._spawn(self._release(worker, request_id))

    async def _release(self, worker: WorkerState, request_id: str) -> None:
        try:
            await worker.client.release(request_id, timeout_s=self.config.release_timeout_seconds)
        except WorkerCallError as exc:
            # The prefill side's lease frees the blocks anyway; this was only an early exit.
            logger.info("release of %s on %s failed: %s", request_id, worker.key, exc.message)


def _describe_decision(
    span: Span, decision: RouteDecision, route_request: RouteRequest, attempts: _Attempts
) -> None:
    """The router's decision and why, on its span."""
    span.set_attributes(
        {
            "tandem.route.path": decision.path.value,
            "tandem.route.reason": decision.reason.value,
            "tandem.route.decode_worker": decision.decode,
            "tandem.route.prefill_worker": decision.prefill or "",
            "tandem.route.prompt_tokens": route_request.prompt_tokens,
            "tandem.route.cached_tokens": (attempts.cached or {}).get(decision.decode, 0),
            "tandem.route.excluded_decode_workers": len(attempts.failed_decode),
        }
    )


def _decode_span(
    request: GenerationRequest, decision: RouteDecision, worker: WorkerState, parent: Context
) -> Span:
    return TRACER.start_span(
        "router.decode",
        context=parent,
        kind=SpanKind.CLIENT,
        attributes={
            "tandem.request_id": request.request_id,
            "tandem.decode_worker": worker.key,
            "tandem.route.path": decision.path.value,
        },
    )


def _reason(finish: FinishReason | None) -> str | None:
    return None if finish is None else finish.value


async def _close(stream: AsyncIterator[DecodeChunk]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()
