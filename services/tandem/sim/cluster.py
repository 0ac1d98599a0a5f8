"""A deployment in virtual time: prefill and decode workers, each a ``SimulatedEngine``
stepped by ``advance`` (its own admission, chunked prefill and modelled step time), the
router's ``choose_route`` deciding where each request goes, and the modelled KV transfer
between workers (the 64-byte payload is copied for real, so the decode side continues
the same token chain).

Requests arrive open loop (a trace of arrival times) or closed loop (a fixed number in
flight, as aiperf's ``--concurrency`` keeps them). Each request's first token reaches the
client when its prefill finishes (local) or when its KV has reached the decode worker
(remote, as the decode worker streams it after the pull); every later token when the
step that produced it ends.
"""

from __future__ import annotations

import functools
import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tandem.api.v1alpha1 import RoutingPolicy
from tandem.engines.base import SamplingParams, StepOutput
from tandem.engines.simulated import SimulatedEngine
from tandem.router.policy import (
    PolicyConfig,
    PrefillPath,
    RouteRequest,
    WorkerRole,
    WorkerSnapshot,
    choose_route,
)
from tandem.router.prefill_rate import update_prefill_rate


@dataclass(frozen=True, slots=True)
class SimRequest:
    arrival: float  # modelled seconds
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class Outcome:
    """One finished request, in modelled seconds."""

    arrival: float
    first_token: float
    end: float
    output_tokens: int
    remote: bool
    # Time between each token and the one before it, as the client sees them: a stall
    # (another prompt's prefill in the same step) shows here, not in the mean ``itl``.
    gaps: tuple[float, ...] = ()

    @property
    def ttft(self) -> float:
        return self.first_token - self.arrival

    @property
    def itl(self) -> float:
        """Mean time between tokens after the first (aiperf's inter-token latency)."""
        if self.output_tokens < 2:
            return 0.0
        return (self.end - self.first_token) / (self.output_tokens - 1)


@dataclass(frozen=True, slots=True)
class Deployment:
    """Workers of one pool share engine options (model, accelerator, TP...)."""

    prefill_workers: int
    decode_workers: int
    prefill_options: Mapping[str, object]
    decode_options: Mapping[str, object]
    min_prefill_tokens: int = 512
    max_prefill_wait_seconds: float | None = None

    @property
    def gpus(self) -> int:
        return self.prefill_workers * _tp(self.prefill_options) + self.decode_workers * _tp(
            self.decode_options
        )


def _tp(options: Mapping[str, object]) -> int:
    value = options.get("tensor_parallel_size", 1)
    return value if isinstance(value, int) else int(str(value))


@dataclass(slots=True)
class _Worker:
    key: str
    role: WorkerRole
    engine: SimulatedEngine
    decoding: dict[str, SamplingParams] = field(default_factory=dict)
    busy: bool = False
    pending_prefill_tokens: int = 0
    pending_requests: int = 0
    prefill_tokens_per_second: float | None = None  # measured as the router does

    def snapshot(self) -> WorkerSnapshot:
        stats = self.engine.stats()
        return WorkerSnapshot(
            key=self.key,
            role=self.role,
            queued_prefill_tokens=self.pending_prefill_tokens,
            queued_requests=self.pending_requests,
            active_sequences=len(self.decoding),
            kv_blocks_free=stats.kv_blocks_free,
            kv_blocks_total=stats.kv_blocks_total,
            kv_block_size=stats.kv_block_size,
            prefill_tokens_per_second=self.prefill_tokens_per_second,
        )


@dataclass(slots=True)
class _Flight:
    request: SimRequest
    decode: _Worker
    prefill: _Worker | None
    tokens_ahead: int = 0  # prefill tokens queued on its prefill worker when it arrived
    first_token: float = -1.0
    last_token: float = -1.0
    tokens: int = 0
    gaps: list[float] = field(default_factory=list)


class Watch(Protocol):
    """Sees each request's first token and its end; answering True stops the run (a
    caller that already knows its verdict need not simulate the rest)."""

    def first_token(self, arrival: float, ttft: float) -> bool: ...

    def finished(self, outcome: Outcome) -> bool: ...


class ClusterSim:
    """Run requests through a deployment; ``run`` returns every finished request."""

    def __init__(self, deployment: Deployment, routing: RoutingPolicy = RoutingPolicy.KV_AWARE):
        self._workers = [
            _Worker(f"prefill-{i}", WorkerRole.PREFILL, _engine(deployment.prefill_options))
            for i in range(deployment.prefill_workers)
        ] + [
            _Worker(f"decode-{i}", WorkerRole.DECODE, _engine(deployment.decode_options))
            for i in range(deployment.decode_workers)
        ]
        self._by_key = {w.key: w for w in self._workers}
        self._policy = PolicyConfig(
            routing=routing,
            min_prefill_tokens=deployment.min_prefill_tokens,
            max_prefill_wait_seconds=deployment.max_prefill_wait_seconds,
        )
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._flights: dict[str, _Flight] = {}
        self._ids = itertools.count()
        self._turn = 0
        self.now = 0.0
        self.outcomes: list[Outcome] = []
        self._on_finish: Callable[[], None] = lambda: None
        self._watch: Watch | None = None
        self._stopped = False

    # -- driving ----------------------------------------------------------------------

    def run_open(
        self,
        requests: Iterable[SimRequest],
        until: float | None = None,
        watch: Watch | None = None,
    ) -> list[Outcome]:
        """Requests arrive at their own times; runs until all finish (or ``until``, or
        ``watch`` stops it)."""
        self._watch = watch
        for request in requests:
            self._at(request.arrival, functools.partial(self._arrive, request))
        self._loop(until)
        return self.outcomes

    def run_closed(
        self,
        make: Callable[[int], SimRequest],
        concurrency: int,
        count: int,
        until: float | None = None,
        ramp_s: float = 0.0,
    ) -> list[Outcome]:
        """``concurrency`` requests in flight until ``count`` were sent; request ``i`` is
        ``make(i)`` with its arrival set to when it is sent. The first ``concurrency``
        start evenly over ``ramp_s`` (aiperf's ``--concurrency-ramp-duration``)."""
        sent = itertools.count()

        def send() -> None:
            i = next(sent)
            if i < count:
                r = make(i)
                self._arrive(SimRequest(self.now, r.prompt_tokens, r.output_tokens))

        self._on_finish = send
        first = min(concurrency, count)
        for i in range(first):
            self._at(ramp_s * i / first, send)
        self._loop(until)
        return self.outcomes

    def _loop(self, until: float | None) -> None:
        while self._events and not self._stopped:
            when, _, action = heapq.heappop(self._events)
            if until is not None and when > until:
                break
            self.now = when
            action()

    def _at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (when, next(self._order), action))

    # -- requests ---------------------------------------------------------------------

    def _arrive(self, request: SimRequest) -> None:
        rid = f"r{next(self._ids)}"
        self._turn += 1
        decision = choose_route(
            [w.snapshot() for w in self._workers],
            RouteRequest(request.prompt_tokens, request.output_tokens),
            {},
            self._policy,
            turn=self._turn,
        )
        if decision is None:
            raise RuntimeError("the deployment has no decode worker")
        decode = self._by_key[decision.decode]
        remote = decision.path is PrefillPath.REMOTE and decision.prefill is not None
        prefill = self._by_key[decision.prefill] if remote and decision.prefill else None
        target = prefill or decode
        self._flights[rid] = _Flight(request, decode, prefill, target.pending_prefill_tokens)
        target.pending_requests += 1
        target.pending_prefill_tokens += request.prompt_tokens
        sampling = SamplingParams(max_tokens=request.output_tokens)
        # Prompt ids do not matter to the clock; their count does.
        target.engine.start_prefill(rid, [1] * request.prompt_tokens, sampling)
        self._wake(target)

    def _prefilled(self, worker: _Worker, output: StepOutput) -> None:
        rid = output.request_id
        flight = self._flights[rid]
        worker.pending_requests -= 1
        worker.pending_prefill_tokens -= flight.request.prompt_tokens
        assert output.prefill is not None
        if flight.prefill is None:  # local: the decode worker goes on with it
            self._token(flight, rid, output)
            if output.finish_reason is None:
                worker.decoding[rid] = SamplingParams(max_tokens=flight.request.output_tokens)
            return
        worker.prefill_tokens_per_second = update_prefill_rate(
            worker.prefill_tokens_per_second,
            flight.tokens_ahead + flight.request.prompt_tokens,
            self.now - flight.request.arrival,
        )
        decode = flight.decode
        layout = decode.engine.reserve(rid, [1] * flight.request.prompt_tokens, output.token)
        source, target = worker.engine.kv_regions()[0], decode.engine.kv_regions()[0]
        for far, near in zip(output.prefill.kv.ranges, layout.ranges, strict=True):
            target[near.offset : near.offset + near.length] = source[
                far.offset : far.offset + far.length
            ]
        delay = decode.engine.config.clock.kv_transfer_seconds(flight.request.prompt_tokens)
        self._at(self.now + delay, lambda: self._arrived(worker, decode, rid, output))

    def _arrived(self, prefill: _Worker, decode: _Worker, rid: str, output: StepOutput) -> None:
        """The KV reached the decode worker: it streams the first token and decodes on."""
        prefill.engine.release(rid)
        self._wake(prefill)
        flight = self._flights[rid]
        decode.engine.commit(rid)
        self._token(flight, rid, output)
        if output.finish_reason is None:
            decode.decoding[rid] = SamplingParams(max_tokens=flight.request.output_tokens)
            self._wake(decode)
        else:
            decode.engine.release(rid)

    def _token(self, flight: _Flight, rid: str, output: StepOutput) -> None:
        flight.tokens += 1
        if flight.first_token < 0:
            flight.first_token = self.now
            arrival = flight.request.arrival
            if self._watch is not None and self._watch.first_token(arrival, self.now - arrival):
                self._stopped = True
        else:
            flight.gaps.append(self.now - flight.last_token)
        flight.last_token = self.now
        if output.finish_reason is not None:
            self._finish(rid)

    def _finish(self, rid: str) -> None:
        flight = self._flights.pop(rid)
        flight.decode.decoding.pop(rid, None)
        flight.decode.engine.release(rid)
        self._wake(flight.decode)
        r = flight.request
        outcome = Outcome(
            r.arrival,
            flight.first_token,
            self.now,
            flight.tokens,
            flight.prefill is not None,
            tuple(flight.gaps),
        )
        self.outcomes.append(outcome)
        if self._watch is not None and self._watch.finished(outcome):
            self._stopped = True
        self._on_finish()

    # -- workers ----------------------------------------------------------------------

    def _wake(self, worker: _Worker) -> None:
        if not worker.busy:
            worker.busy = True
            self._at(self.now, lambda: self._step(worker))

    def _step(self, worker: _Worker) -> None:
        outputs, seconds = worker.engine.advance(worker.decoding)
        # Routing here keeps no KV index: the engine's KV events (prefix cache) are not
        # read, only kept from piling up.
        worker.engine.drain_kv_events()
        if seconds == 0.0:
            worker.busy = False  # nothing runnable until a release, commit or arrival
            return
        self._at(self.now + seconds, lambda: self._stepped(worker, outputs))

    def _stepped(self, worker: _Worker, outputs: Sequence[StepOutput]) -> None:
        for output in outputs:
            if output.prefill is not None:
                self._prefilled(worker, output)
            elif output.request_id in self._flights:
                self._token(self._flights[output.request_id], output.request_id, output)
        self._step(worker)


def _engine(options: Mapping[str, object]) -> SimulatedEngine:
    return SimulatedEngine.from_options(dict(options))
