"""``tandem up``'s autoscaler: the operator's policy, acting on worker processes.

A :class:`LocalAutoscaler` is a supervisor tick hook. Every ``interval_seconds``
(``spec.autoscaling``) it reads the frontend's ``/metrics`` and ``/readyz``, builds each
pool's observation, asks :func:`tandem.autoscale.decide`, and acts. Between rounds it
reads the router's count of diverted long prompts once a second, and takes the round
at once when that grew (``tandem.autoscale.early``). Acting:

- **up**: :meth:`Supervisor.scale` starts workers; they join the membership file once
  they print READY (a prefill pool at zero comes back the same way when the router
  reports long prompts diverted to decode workers);
- **down**: :func:`tandem.autoscale.choose_victims` picks idle or least-loaded workers
  from the frontend's per-worker view; :meth:`Supervisor.retire` takes them out of the
  membership file *before* anything stops, so the router routes no new work there; a
  :class:`~tandem.runtime.drainer.Drainer` thread drains each one (``Drain`` RPC, then
  until the router has nothing in flight there, bounded by the grace); only then does
  :meth:`Supervisor.stop_retired` SIGTERM it.

Scale-ups block the supervision round until the new workers are up (seconds); drains
never do. Mode ``external`` has no local meaning (there is no HPA here): nothing scales.
Every round is recorded in ``autoscaling.json`` (``scaling_record``) for ``tandem status``.
"""

from __future__ import annotations

import json
import logging
import math
import time
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from tandem.api.v1alpha1 import AutoscalingMode, InferenceCluster, PoolRole
from tandem.autoscale import (
    LoadSample,
    PolicyState,
    PoolCounts,
    ScaleDecision,
    ScalingConfig,
    WorkerLoad,
    choose_victims,
    compute_observation,
    compute_scaling_config,
    decide,
    initial_state,
)
from tandem.autoscale.early import POLL_SECONDS, may_decide_early, prompts_diverted_since
from tandem.autoscale.exposition import (
    DIVERTED_PROMPTS_TOTAL,
    RouterReading,
    SampleWindow,
    parse_router_reading,
    parse_worker_loads,
)
from tandem.runtime.drainer import Drainer, DrainResult, Fetch, fetch_url
from tandem.runtime.plan import ProcessSpec
from tandem.runtime.scaling_record import (
    AutoscalingRecord,
    PoolRecord,
    ScaleEvent,
    TickPool,
    TickRecord,
    write_record,
)
from tandem.runtime.supervisor import StartupError
from tandem.security import CredentialStore

logger = logging.getLogger(__name__)

SCRAPE_TIMEOUT_S = 2.0
DEFAULT_DRAIN_GRACE_S = 60.0


class ScalableCluster(Protocol):
    """What the autoscaler needs from the supervisor (``Supervisor`` implements it)."""

    def workers(self, role: PoolRole) -> list[ProcessSpec]: ...

    def scale(self, role: PoolRole, replicas: int) -> None: ...

    def retire(self, names: Sequence[str]) -> list[ProcessSpec]: ...

    def stop_retired(self, names: Sequence[str]) -> None: ...


def autoscales_locally(cluster: InferenceCluster) -> bool:
    autoscaling = cluster.spec.autoscaling
    return autoscaling.enabled and autoscaling.mode is AutoscalingMode.BUILTIN


def compute_pool_counts(workers: Sequence[ProcessSpec], loads: dict[str, WorkerLoad]) -> PoolCounts:
    """Current = the pool's workers in membership; ready = those the router routes to."""
    ready = sum(
        1
        for w in workers
        if (load := loads.get(w.address)) is not None and load.ready and not load.draining
    )
    return PoolCounts(current=len(workers), ready=ready, starting=len(workers) - ready)


def choose_local_victims(
    workers: Sequence[ProcessSpec], loads: dict[str, WorkerLoad], count: int
) -> list[str]:
    """Names of the workers to retire: a worker the router does not know yet counts as
    not ready (nothing to finish there)."""
    by_address = {w.address: w.name for w in workers}
    candidates = [loads.get(w.address) or WorkerLoad(key=w.address, ready=False) for w in workers]
    return [by_address[key] for key in choose_victims(candidates, count)]


class LocalAutoscaler:
    def __init__(
        self,
        cluster: InferenceCluster,
        target: ScalableCluster,
        *,
        frontend_url: str,
        state_dir: Path,
        drain_grace_s: float = DEFAULT_DRAIN_GRACE_S,
        fetch: Fetch = fetch_url,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        progress: Callable[[str], None] | None = None,
        credentials: CredentialStore | None = None,
    ) -> None:
        """``credentials``: the cluster's, for the Drain RPC to retiring workers."""
        self._target = target
        self._progress = progress or (lambda line: None)
        self._base = frontend_url.rstrip("/")
        self._state_dir = state_dir
        self._fetch = fetch
        self._clock = clock
        self._wall = wall_clock
        self._configs: dict[PoolRole, ScalingConfig] = {
            role: compute_scaling_config(cluster.spec, role) for role in PoolRole
        }
        self._interval = float(cluster.spec.autoscaling.interval_seconds)
        self._states: dict[PoolRole, PolicyState] = {}
        self._previous: dict[PoolRole, LoadSample] = {}
        self._windows = {role: SampleWindow() for role in PoolRole}
        self._next_at: float | None = None
        self._polled_at = -math.inf  # the last read of the diverted-prompts counter
        self._drainer = Drainer(
            f"{self._base}/readyz", drain_grace_s, fetch=fetch, credentials=credentials
        )
        self.record = AutoscalingRecord(interval_seconds=self._interval)
        self._save()  # replaces a record left by an earlier run

    def __call__(self, supervisor: object) -> None:
        self.tick()

    def reconfigure(self, cluster: InferenceCluster) -> None:
        """Decide with ``cluster``'s bounds and targets from the next round (a re-planned
        shape); what each pool has learnt (its policy state) carries over."""
        self._configs = {role: compute_scaling_config(cluster.spec, role) for role in PoolRole}

    def close(self) -> None:
        self._drainer.close()

    # ------------------------------------------------------------------ the round

    def tick(self) -> None:
        """Finish drains, and decide once per interval."""
        finished = self._drainer.collect()
        if finished:
            self._stop_drained(finished)
        now = self._clock()
        due = self._next_at is None or now >= self._next_at
        early = not due and self._prompts_diverted(now)
        if not (due or early):
            if finished:
                self._save()
            return
        if early:
            self._next_at = now + self._interval
        else:
            # Keep the cadence (a round that starts late does not delay the next ones).
            planned = (self._next_at or now) + self._interval
            self._next_at = planned if planned > now else now + self._interval
        self.record.ticks += 1
        started = self._wall()  # the round's time is when it looked, not when it finished
        try:
            reading, loads = self._scrape(now)
        except (OSError, ValueError) as exc:
            # No blind action: without the router's view there is nothing to decide on.
            logger.warning("autoscaler: cannot read the frontend at %s: %s", self._base, exc)
            self.record.error = f"cannot read the frontend: {exc}"
            self._save()
            return
        self.record.error = ""
        tick_pools: dict[str, TickPool] = {}
        for role in PoolRole:
            tick_pools[role.value] = self._decide_and_act(role, reading, loads, now, early)
        self.record.add_tick(TickRecord(self.record.ticks, started, tick_pools, early=early))
        self._save()

    def _prompts_diverted(self, now: float) -> bool:
        """Whether the router diverted long prompts since the last round, checked where
        an early round could act, at most every ``POLL_SECONDS``."""
        last = self._previous.get(PoolRole.PREFILL)
        if last is None or now - self._polled_at < POLL_SECONDS:
            return False
        current = len(self._target.workers(PoolRole.PREFILL))
        maximum = self._configs[PoolRole.PREFILL].max_replicas
        if not may_decide_early(current, maximum, now - last.at, self._interval):
            return False
        self._polled_at = now
        query = urllib.parse.urlencode({"name[]": DIVERTED_PROMPTS_TOTAL})
        try:
            text = self._fetch(f"{self._base}/metrics?{query}", SCRAPE_TIMEOUT_S).decode()
            latest = parse_router_reading(text, at=now).sample(PoolRole.PREFILL)
        except (OSError, ValueError):
            return False  # the round at the interval reports an unreachable frontend
        return prompts_diverted_since(last.diverted_prompts_total, latest.diverted_prompts_total)

    def _scrape(self, now: float) -> tuple[RouterReading, dict[str, WorkerLoad]]:
        text = self._fetch(f"{self._base}/metrics", SCRAPE_TIMEOUT_S).decode()
        reading = parse_router_reading(text, at=now)
        loads = parse_worker_loads(
            json.loads(self._fetch(f"{self._base}/readyz", SCRAPE_TIMEOUT_S))
        )
        return reading, loads

    def _decide_and_act(
        self,
        role: PoolRole,
        reading: RouterReading,
        loads: dict[str, WorkerLoad],
        now: float,
        early: bool,
    ) -> TickPool:
        workers = self._target.workers(role)
        counts = compute_pool_counts(workers, loads)
        sample = reading.sample(role)
        window = self._windows[role]
        observation = compute_observation(
            counts, sample, self._previous.get(role), decode_baseline=window.baseline()
        )
        window.add(sample)
        self._previous[role] = sample
        state = self._states.get(role) or initial_state(now, counts.current)
        decision, self._states[role] = decide(self._configs[role], observation, state, now=now)
        self._remember(role, decision, sample, counts)
        if decision.changed:
            self._act(role, decision, workers, loads, early)
        return TickPool(
            current=counts.current,
            ready=counts.ready,
            desired=decision.desired,
            queued_tokens=sample.queued_tokens,
            queued_requests=sample.queued_requests,
            diverted_tokens=sample.diverted_prefill_tokens,
            active_sequences=sample.active_sequences,
        )

    def _act(
        self,
        role: PoolRole,
        decision: ScaleDecision,
        workers: Sequence[ProcessSpec],
        loads: dict[str, WorkerLoad],
        early: bool,
    ) -> None:
        self._progress(
            f"autoscaler: {role.value} {decision.current} -> {decision.desired} "
            f"({decision.reason.value}{', early: long prompts diverted' if early else ''})"
        )
        logger.info("autoscaler: %s", decision.message)
        self._event(role, "scale", decision.current, decision.desired, decision)
        if decision.desired > decision.current:
            try:
                self._target.scale(role, decision.desired)
            except StartupError as exc:
                logger.error("autoscaler: %s scale-up failed: %s", role.value, exc)
                self.record.add_event(
                    ScaleEvent(
                        self.record.ticks, self._wall(), role.value, "error", message=str(exc)
                    )
                )
            return
        victims = choose_local_victims(workers, loads, decision.current - decision.desired)
        for spec in self._target.retire(victims):
            load = loads.get(spec.address)
            in_flight = load.in_flight if load is not None else 0
            self.record.add_event(
                ScaleEvent(
                    self.record.ticks,
                    self._wall(),
                    role.value,
                    "retire",
                    worker=spec.name,
                    in_flight_left=in_flight,
                    message=f"out of membership with {in_flight} request(s) in flight; draining",
                )
            )
            self._drainer.start(spec.name, spec.address)
        self.record.pools[role.value].draining = [
            n for n in self._drainer.draining if n.startswith(f"{role.value}-")
        ]

    def _stop_drained(self, results: list[DrainResult]) -> None:
        self._target.stop_retired([r.name for r in results])
        for result in results:
            pool = result.name.rsplit("-", 1)[0]
            self._progress(
                f"autoscaler: {result.name} drained in {result.seconds:.1f}s "
                f"({result.in_flight_left} in flight left); stopped"
            )
            self.record.add_event(
                ScaleEvent(
                    self.record.ticks,
                    self._wall(),
                    pool,
                    "drained",
                    worker=result.name,
                    in_flight_left=result.in_flight_left,
                    message=f"drained in {result.seconds:.1f}s",
                )
            )
            if pool in self.record.pools:
                self.record.pools[pool].draining = [
                    n for n in self.record.pools[pool].draining if n != result.name
                ]

    # ------------------------------------------------------------------ records

    def _remember(
        self, role: PoolRole, decision: ScaleDecision, sample: LoadSample, counts: PoolCounts
    ) -> None:
        previous = self.record.pools.get(role.value) or PoolRecord()
        changed = decision.changed
        self.record.pools[role.value] = PoolRecord(
            desired=decision.desired,
            current=counts.current,
            ready=counts.ready,
            recommended=decision.recommended,
            reason=decision.reason.value,
            limited_by=decision.limited_by.value,
            message=decision.message,
            queued_requests=sample.queued_requests,
            queued_tokens=sample.queued_tokens,
            diverted_tokens=sample.diverted_prefill_tokens,
            active_sequences=sample.active_sequences,
            last_scale_time=self._wall() if changed else previous.last_scale_time,
            last_scale_reason=decision.reason.value if changed else previous.last_scale_reason,
            last_scale_message=decision.message if changed else previous.last_scale_message,
            draining=previous.draining,
        )

    def _event(
        self, role: PoolRole, kind: str, before: int, after: int, decision: ScaleDecision
    ) -> None:
        self.record.add_event(
            ScaleEvent(
                self.record.ticks,
                self._wall(),
                role.value,
                kind,
                from_replicas=before,
                to_replicas=after,
                reason=decision.reason.value,
                message=decision.message,
            )
        )

    def _save(self) -> None:
        self.record.updated_at = self._wall()
        write_record(self._state_dir, self.record)
