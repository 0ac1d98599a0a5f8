"""A discrete-event model of one InferenceCluster's two pools, for the simulator.

Routing follows Tandem's router (``tandem.router.policy``): each request is placed on
arrival. It goes to the prefill worker with the fewest pending prompt tokens, unless
the prefill pool has no ready worker or every ready one already holds
``saturation_tokens``; then it is prefilled locally by the decode worker with the
least local work, at the slower ``local_prefill_tokens_per_second`` (the router's
fallback, and the scale-to-zero path). A prefill worker runs one prompt at a time at
``prefill_tokens_per_second``. Prefilled requests wait for a decode slot (a worker
with a free sequence slot and room for prompt + output in its KV cache) and then
decode at a fixed per-sequence speed.

Workers cost GPU time from the moment they are scheduled onto a node - cold start
(loading weights) included - until a drained worker has finished its last request. A
pool may have a schedulable limit: workers beyond it stay pending (unschedulable) and
cost nothing until another worker leaves.

Deterministic: events at the same time run in the order they were scheduled.
"""

from __future__ import annotations

import enum
import functools
import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from tandem.api.v1alpha1 import PoolRole
from tandem.autoscale.drain import WorkerLoad, choose_victims
from tandem.autoscale.signals import LoadSample, PoolCounts
from tandem_dev.autoscale_sim.oracle import PoolHardware
from tandem_dev.autoscale_sim.traces import Arrival

# Matches the router's PolicyConfig.prefill_saturation_tokens default.
DEFAULT_SATURATION_TOKENS = 131_072


class WorkerPhase(enum.Enum):
    UNSCHEDULED = "unscheduled"
    STARTING = "starting"
    READY = "ready"


@dataclass(slots=True)
class SimRequest:
    arrival: Arrival
    prefilled_at: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    local_prefill: bool = False

    @property
    def prompt_tokens(self) -> int:
        return self.arrival.prompt_tokens

    @property
    def context_tokens(self) -> int:
        return self.arrival.prompt_tokens + self.arrival.output_tokens


@dataclass(slots=True)
class SimWorker:
    key: str
    role: PoolRole
    phase: WorkerPhase
    scheduled_at: float | None = None
    removed_at: float | None = None
    draining: bool = False
    # Prompts this worker prefills, the first one in progress: its own (prefill
    # workers) or the router's local fallbacks (decode workers).
    prompts: deque[SimRequest] = field(default_factory=deque)
    pending_tokens: int = 0
    active: int = 0  # decode sequences
    kv_used: int = 0

    @property
    def ready(self) -> bool:
        return self.phase is WorkerPhase.READY

    @property
    def idle(self) -> bool:
        return not self.prompts and self.active == 0

    def gpu_seconds(self, until: float) -> float:
        if self.scheduled_at is None:
            return 0.0
        end = until if self.removed_at is None else min(self.removed_at, until)
        return max(0.0, end - self.scheduled_at)


@dataclass(slots=True)
class SimPool:
    role: PoolRole
    schedulable_limit: int | None = None
    workers: list[SimWorker] = field(default_factory=list)

    def present(self) -> list[SimWorker]:
        return [w for w in self.workers if w.removed_at is None]

    def live(self) -> list[SimWorker]:
        return [w for w in self.present() if not w.draining]

    def serving(self) -> list[SimWorker]:
        return [w for w in self.live() if w.ready]


class SimCluster:
    """The two pools and the router between them, driven by events."""

    def __init__(
        self,
        hardware: PoolHardware,
        initial: dict[PoolRole, int],
        schedulable_limits: dict[PoolRole, int | None] | None = None,
        saturation_tokens: int = DEFAULT_SATURATION_TOKENS,
        reroute_local_prefills: bool = True,
    ) -> None:
        self.hardware = hardware
        self.saturation_tokens = saturation_tokens
        self.reroute_local_prefills = reroute_local_prefills
        limits = schedulable_limits or {}
        self.pools = {role: SimPool(role, limits.get(role)) for role in PoolRole}
        self.now = 0.0
        self.finished: list[SimRequest] = []
        self.decode_queue: deque[SimRequest] = deque()
        # The router's counters.
        self.prompt_tokens_total = 0
        self.requests_total = 0
        self.decode_seconds_sum = 0.0
        self.decode_seconds_count = 0
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._names = itertools.count()
        for role, count in initial.items():
            for _ in range(count):
                worker = self._new_worker(role)
                worker.phase, worker.scheduled_at = WorkerPhase.READY, 0.0

    # ------------------------------------------------------------------ time

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (when, next(self._order), action))

    def run_until(self, until: float) -> None:
        while self._events and self._events[0][0] <= until:
            when, _, action = heapq.heappop(self._events)
            self.now = when
            action()
        self.now = until

    def add_arrivals(self, arrivals: Iterable[Arrival]) -> None:
        for arrival in arrivals:
            self.at(arrival.at, functools.partial(self._arrive, SimRequest(arrival)))

    # ------------------------------------------------------------------ observing

    def counts(self, role: PoolRole) -> PoolCounts:
        live = self.pools[role].live()
        ready = sum(1 for w in live if w.ready)
        return PoolCounts(
            current=len(live),
            ready=ready,
            starting=len(live) - ready,
            unschedulable=sum(1 for w in live if w.phase is WorkerPhase.UNSCHEDULED),
        )

    def sample(self, role: PoolRole) -> LoadSample:
        """What the router's metrics would say about ``role`` right now."""
        base = LoadSample(
            at=self.now,
            prompt_tokens_total=float(self.prompt_tokens_total),
            requests_total=float(self.requests_total),
            decode_seconds_sum=self.decode_seconds_sum,
            decode_seconds_count=float(self.decode_seconds_count),
        )
        decode = self.pools[PoolRole.DECODE].present()
        if role is PoolRole.PREFILL:
            prefill = self.pools[PoolRole.PREFILL].present()
            return replace(
                base,
                queued_requests=sum(len(w.prompts) for w in prefill),
                queued_tokens=sum(w.pending_tokens for w in prefill),
                diverted_prefill_tokens=sum(w.pending_tokens for w in decode),
            )
        ready = [w for w in decode if w.ready and not w.draining]
        capacity = self.hardware.decode_kv_capacity_tokens
        kv = sum(w.kv_used for w in ready) / (capacity * len(ready)) if ready else 0.0
        return replace(
            base,
            queued_requests=len(self.decode_queue),
            active_sequences=sum(w.active for w in decode),
            kv_utilization=kv,
        )

    def gpu_seconds(self, role: PoolRole, until: float) -> float:
        return sum(w.gpu_seconds(until) for w in self.pools[role].workers)

    # ------------------------------------------------------------------ scaling

    def scale(self, role: PoolRole, desired: int) -> None:
        """Grow by starting workers, or shrink by draining the ones drain.py picks."""
        pool = self.pools[role]
        live = pool.live()
        for _ in range(desired - len(live)):
            self._new_worker(role)
        if desired < len(live):
            victims = set(choose_victims([_load(w) for w in live], len(live) - desired))
            for worker in live:
                if worker.key in victims:
                    worker.draining = True  # the router stops sending it work
                    if worker.idle or not worker.ready:
                        self._remove(worker)
        self._dispatch_decode()

    def _new_worker(self, role: PoolRole) -> SimWorker:
        pool = self.pools[role]
        name = f"{role.value}-{next(self._names):04d}"
        worker = SimWorker(name, role, WorkerPhase.UNSCHEDULED)
        pool.workers.append(worker)
        self._try_schedule(pool, worker)
        return worker

    def _try_schedule(self, pool: SimPool, worker: SimWorker) -> None:
        limit = pool.schedulable_limit
        scheduled = sum(1 for w in pool.present() if w.phase is not WorkerPhase.UNSCHEDULED)
        if limit is not None and scheduled >= limit:
            return
        worker.phase, worker.scheduled_at = WorkerPhase.STARTING, self.now
        self.at(self.now + self.hardware.cold_start_seconds, lambda: self._ready(worker))

    def _ready(self, worker: SimWorker) -> None:
        if worker.removed_at is not None:
            return
        worker.phase = WorkerPhase.READY
        if worker.role is PoolRole.PREFILL and self.reroute_local_prefills:
            self._reroute_local_prefills()
        self._dispatch_decode()

    def _reroute_local_prefills(self) -> None:
        # Prompts parked on decode workers while the prefill pool was empty, and not
        # started yet, move to the prefill pool now that it has a worker.
        waiting: list[SimRequest] = []
        for decode in self.pools[PoolRole.DECODE].present():
            while len(decode.prompts) > 1:
                request = decode.prompts.pop()
                decode.pending_tokens -= request.prompt_tokens
                waiting.append(request)
        for request in sorted(waiting, key=lambda r: r.arrival.at):
            request.local_prefill = False
            self._route(request)

    def _remove(self, worker: SimWorker) -> None:
        worker.removed_at = self.now
        pool = self.pools[worker.role]
        waiting = [w for w in pool.live() if w.phase is WorkerPhase.UNSCHEDULED]
        if waiting:  # room freed: the scheduler places the next pending pod
            self._try_schedule(pool, waiting[0])

    # ------------------------------------------------------------------ requests

    def _arrive(self, request: SimRequest) -> None:
        self.prompt_tokens_total += request.prompt_tokens
        self.requests_total += 1
        self._route(request)

    def _route(self, request: SimRequest) -> None:
        prefill = [
            w
            for w in self.pools[PoolRole.PREFILL].serving()
            if w.pending_tokens < self.saturation_tokens
        ]
        if prefill:
            worker = min(prefill, key=_least_pending)
        else:
            decode = self.pools[PoolRole.DECODE].serving()
            if not decode:  # nobody can take it yet: the frontend holds it a moment
                self.at(self.now + 1.0, lambda: self._route(request))
                return
            request.local_prefill = True
            worker = min(decode, key=_least_pending)
        worker.prompts.append(request)
        worker.pending_tokens += request.prompt_tokens
        if len(worker.prompts) == 1:
            self._start_prompt(worker)

    def _prefill_rate(self, worker: SimWorker) -> float:
        if worker.role is PoolRole.PREFILL:
            return self.hardware.prefill_tokens_per_second
        return self.hardware.local_prefill_tokens_per_second

    def _start_prompt(self, worker: SimWorker) -> None:
        seconds = worker.prompts[0].prompt_tokens / self._prefill_rate(worker)
        self.at(self.now + seconds, lambda: self._prompt_done(worker))

    def _prompt_done(self, worker: SimWorker) -> None:
        request = worker.prompts.popleft()
        worker.pending_tokens -= request.prompt_tokens
        request.prefilled_at = self.now
        self.decode_queue.append(request)
        if worker.prompts:
            self._start_prompt(worker)
        elif worker.draining and worker.idle:
            self._remove(worker)
        self._dispatch_decode()

    def _dispatch_decode(self) -> None:
        hw = self.hardware
        serving = self.pools[PoolRole.DECODE].serving()
        while self.decode_queue:
            request = self.decode_queue[0]
            fits = [
                w
                for w in serving
                if w.active < hw.decode_max_sequences
                and w.kv_used + request.context_tokens <= hw.decode_kv_capacity_tokens
            ]
            if not fits:
                return
            worker = min(fits, key=lambda w: (w.active, w.key))
            self.decode_queue.popleft()
            worker.active += 1
            worker.kv_used += request.context_tokens
            per_token = 1.0 / hw.decode_tokens_per_second_per_sequence
            request.first_token_at = self.now + per_token
            seconds = request.arrival.output_tokens * per_token
            self.at(self.now + seconds, functools.partial(self._decode_done, worker, request))

    def _decode_done(self, worker: SimWorker, request: SimRequest) -> None:
        worker.active -= 1
        worker.kv_used -= request.context_tokens
        request.finished_at = self.now
        assert request.first_token_at is not None
        self.decode_seconds_sum += self.now - request.first_token_at
        self.decode_seconds_count += 1
        self.finished.append(request)
        if worker.draining and worker.idle:
            self._remove(worker)
        self._dispatch_decode()


def _least_pending(worker: SimWorker) -> tuple[int, str]:
    return worker.pending_tokens, worker.key


def _load(worker: SimWorker) -> WorkerLoad:
    return WorkerLoad(
        key=worker.key,
        ready=worker.ready,
        active_sequences=worker.active,
        queued_requests=len(worker.prompts),
        queued_tokens=worker.pending_tokens,
    )
