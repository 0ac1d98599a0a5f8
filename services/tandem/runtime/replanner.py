"""``tandem up`` under ``spec.planning``: plan at start, watch the served workload, re-plan
and roll the worker processes -- the operator's planning, on one machine.

The decisions are the operator's own pure functions: ``tandem.sim.spec_plan`` plans (in a
child process, killed after a limit: ``tandem.sim.plan_process``),
``tandem.sim.planned_spec.apply_plan`` turns a plan into a spec, and
``tandem.sim.workload_tracking`` observes the frontend's length histograms and steps the
re-plan hysteresis. What is local is here and in ``reshape``:

- :func:`plan_at_start` plans before any process starts (bounded by the child's limit);
  the launcher starts the planned shape, or the hand-written one when the plan misses,
  fails or the mode is ``check``.
- :class:`LocalReplanner`, a supervisor tick hook, reads the frontend's ``/metrics``
  every ``reshape.compute_scrape_seconds(window)``. When a re-plan is due, the new plan
  is made on a thread of its own (the child process does the work; supervision goes on),
  and the next round rolls the pools (``reshape.compute_rolls``): new workers start and
  join the membership (blocking that round, as an autoscaler scale-up does), once the
  frontend routes to them the old ones leave the membership and are drained
  (``Drainer``), and only then stopped. ``check`` reports what it observes and never
  re-plans.

Everything it knows is written to ``planning.json`` (``planning_record``) for
``tandem status``.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.parse
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tandem.api.v1alpha1 import (
    InferenceCluster,
    InferenceClusterSpec,
    PlanningMode,
    PlanOutcome,
    PlanStatus,
    PoolRole,
)
from tandem.autoscale.exposition import parse_worker_loads
from tandem.runtime.autoscaler import choose_local_victims
from tandem.runtime.drainer import Drainer, Fetch, fetch_url
from tandem.runtime.plan import ProcessSpec
from tandem.runtime.planning_record import PlanningRecord, write_record
from tandem.runtime.reshape import PoolRoll, compute_rolls, compute_scrape_seconds, describe_rolls
from tandem.runtime.supervisor import StartupError
from tandem.security import CredentialStore
from tandem.sim.plan_process import PlanningFailed, plan_in_child
from tandem.sim.planned_spec import apply_cluster_plan
from tandem.sim.spec_plan import compute_spec_hash, describe_failure
from tandem.sim.workload_observation import LENGTH_SERIES, parse_length_counts
from tandem.sim.workload_tracking import WorkloadTrack

logger = logging.getLogger(__name__)

SCRAPE_TIMEOUT_S = 2.0
DEFAULT_DRAIN_GRACE_S = 60.0
# How long a roll waits for the frontend to route to its new workers before it retires
# the old ones anyway (they are up: the router's next health round finds them).
ROUTED_WAIT_S = 30.0

PlanFunction = Callable[[InferenceClusterSpec], PlanStatus]


class ReshapeableCluster(Protocol):
    """What the re-planner needs from the supervisor (``Supervisor`` implements it)."""

    def workers(self, role: PoolRole) -> list[ProcessSpec]: ...

    def add_workers(self, role: PoolRole, count: int) -> list[ProcessSpec]: ...

    def retire(self, names: Sequence[str]) -> list[ProcessSpec]: ...

    def stop_retired(self, names: Sequence[str]) -> None: ...

    def reshape(self, cluster: InferenceCluster) -> None: ...


def plans(cluster: InferenceCluster) -> bool:
    return cluster.spec.planning.mode is not PlanningMode.OFF


def plan_safely(plan: PlanFunction, spec: InferenceClusterSpec) -> PlanStatus:
    """``plan(spec)``, or a failed plan saying why none came back."""
    try:
        return plan(spec)
    except PlanningFailed as exc:
        return describe_failure(compute_spec_hash(spec), spec.planning.mode, str(exc))


def plan_at_start(
    cluster: InferenceCluster,
    *,
    progress: Callable[[str], None],
    plan: PlanFunction = plan_in_child,
) -> tuple[PlanStatus, InferenceCluster]:
    """The plan for ``cluster`` and the cluster to start: planned under ``auto`` when the
    plan meets the SLO, as written otherwise."""
    progress(f"planning ({cluster.spec.planning.mode.value}) from spec.slo and spec.workload")
    status = plan_safely(plan, cluster.spec)
    progress(describe_plan(status))
    return status, apply_cluster_plan(cluster, status)


def describe_plan(plan: PlanStatus) -> str:
    """One line: outcome, the plan in words, what it predicts and where its clock is from."""
    line = f"plan ({plan.mode.value}, {plan.outcome.value}): {plan.message}"
    if plan.predicted is not None:
        p = plan.predicted
        line += (
            f"; predicted TTFT p90 {p.ttft_p90_seconds:g} s, ITL p90 "
            f"{p.itl_p90_seconds * 1e3:.1f} ms"
        )
    if plan.tokens_per_second_per_gpu is not None:
        line += f", {plan.tokens_per_second_per_gpu:g} tokens/s/GPU"
    if plan.clock_sources:
        line += f"; clock: {', '.join(plan.clock_sources)}"
    return line


def describe_running_shape(cluster: InferenceCluster, plan: PlanStatus | None) -> str:
    """The plan's shape when the cluster runs it, else the spec's pool sizes."""
    if plan is not None and apply_cluster_plan(cluster, plan) is not cluster:
        return plan.shape or ""
    spec = cluster.spec
    return f"{spec.prefill.replicas}P+{spec.decode.replicas}D as written"


@dataclass(slots=True)
class _Roll:
    rolls: list[PoolRoll]
    old: dict[PoolRole, list[str]]  # the pools' workers before the roll
    new: list[str]  # addresses of the workers started for it
    started_at: float
    retired: bool = False
    failed: bool = False  # a new worker did not start: the old ones stay
    draining: set[str] = field(default_factory=set)


class LocalReplanner:
    def __init__(
        self,
        cluster: InferenceCluster,
        plan: PlanStatus,
        target: ReshapeableCluster,
        *,
        frontend_url: str,
        state_dir: Path,
        on_reshape: Callable[[InferenceCluster], None] = lambda cluster: None,
        plan_function: PlanFunction = plan_in_child,
        fetch: Fetch = fetch_url,
        clock: Callable[[], float] = time.time,
        progress: Callable[[str], None] | None = None,
        credentials: CredentialStore | None = None,
        drain_grace_s: float = DEFAULT_DRAIN_GRACE_S,
    ) -> None:
        """``cluster``: as written (plans apply to it); ``plan``: the one it started with.
        ``on_reshape`` hears of every new running spec (the autoscaler's bounds and
        targets follow it)."""
        assert cluster.spec.workload is not None, "planning needs spec.workload"
        self._cluster = cluster
        self._running = apply_cluster_plan(cluster, plan)
        self._target = target
        self._on_reshape = on_reshape
        self._plan_function = plan_function
        self._base = frontend_url.rstrip("/")
        self._state_dir = state_dir
        self._fetch = fetch
        self._clock = clock
        self._progress = progress or (lambda line: None)
        self._track = WorkloadTrack.of(cluster.spec.workload)
        self._period = compute_scrape_seconds(cluster.spec.planning.replan.window_seconds)
        self._next_scrape = -float("inf")
        self._planner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tandem-plan")
        self._planning: Future[PlanStatus] | None = None
        self._waiting: PlanStatus | None = None  # a plan that came back during a roll
        self._roll: _Roll | None = None
        self._drainer = Drainer(
            f"{self._base}/readyz", drain_grace_s, fetch=fetch, credentials=credentials
        )
        self.record = PlanningRecord(
            plan=plan,
            workload=self._track.status(),
            shape=describe_running_shape(cluster, plan),
        )
        self._save()

    def __call__(self, supervisor: object) -> None:
        self.tick()

    def close(self) -> None:
        self._drainer.close()
        # A plan under way ends within its child's time limit (the interpreter waits for
        # its thread at exit); a queued one is dropped.
        self._planner.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ the round

    def tick(self) -> None:
        self._collect_drains()
        self._collect_plan()
        if self._roll is None and self._waiting is not None:
            plan, self._waiting = self._waiting, None
            self._adopt(plan)
        if self._roll is not None and not self._roll.retired:
            self._retire_when_routed(self._roll)
        now = self._clock()
        if now >= self._next_scrape:
            self._next_scrape = now + self._period
            self._observe(now)

    def _observe(self, now: float) -> None:
        query = urllib.parse.urlencode(LENGTH_SERIES)
        try:
            text = self._fetch(f"{self._base}/metrics?{query}", SCRAPE_TIMEOUT_S).decode()
            counts = {self._base: parse_length_counts(text)}
        except (OSError, ValueError) as exc:
            logger.warning("planning: cannot read the frontend at %s: %s", self._base, exc)
            self.record.error = f"workload not observed: {exc}"
            self._save()
            return
        planning = self._cluster.spec.planning
        verdict = self._track.observe(planning, now, counts)
        self.record.workload = self._track.status()
        if verdict.changed and not verdict.replan:
            self._progress(
                f"planning: the workload left the plan: {verdict.outside}"
                if verdict.outside
                else "planning: the workload is inside the plan again"
            )
        if verdict.replan:
            planned = self._track.planned
            self._progress(
                f"planning: the workload left the plan for {planning.replan.window_seconds}s "
                f"({verdict.outside}): re-planning for ISL {planned.isl}, OSL {planned.osl}, "
                f"up to {planned.requests_per_second.max:g} req/s"
            )
            spec = self._track.planned_spec(self._cluster.spec)
            self._planning = self._planner.submit(plan_safely, self._plan_function, spec)
        self._save()

    # ------------------------------------------------------------------ plans and rolls

    def _collect_plan(self) -> None:
        if self._planning is None or not self._planning.done():
            return
        plan, self._planning = self._planning.result(), None
        self._progress(describe_plan(plan))
        self.record.plan = plan
        self.record.error = "" if plan.outcome is not PlanOutcome.FAILED else plan.message
        if self._roll is None:
            self._adopt(plan)
        else:
            self._waiting = plan
        self._save()

    def _adopt(self, plan: PlanStatus) -> None:
        """Run ``plan``'s shape: reshape the supervisor, start the new workers."""
        cluster = self._cluster
        planned = apply_cluster_plan(cluster, plan)
        if planned is cluster:  # missed or failed: keep what runs, report it
            return
        current = {role: len(self._target.workers(role)) for role in PoolRole}
        rolls = compute_rolls(self._running, planned, current)
        self._target.reshape(planned)
        self._on_reshape(planned)
        self._running = planned
        self.record.shape = describe_running_shape(cluster, plan)
        if not rolls:
            return
        self._progress(f"planning: rolling to {plan.shape}: {describe_rolls(rolls)}")
        old = {r.role: [w.name for w in self._target.workers(r.role)] for r in rolls}
        roll = _Roll(rolls, old, [], self._clock())
        self._roll = roll
        self.record.rolling = describe_rolls(rolls)
        for r in rolls:
            if r.start:
                try:
                    added = self._target.add_workers(r.role, r.start)
                except StartupError as exc:
                    # The old workers keep serving, all of them: retiring any could leave
                    # a pool with no worker. The new ones are the supervisor's to restart.
                    logger.error("planning: new %s workers did not start: %s", r.role.value, exc)
                    self.record.error = f"roll: {exc}"
                    roll.failed = True
                    continue
                roll.new.extend(w.address for w in added)
        self._retire_when_routed(roll)

    def _retire_when_routed(self, roll: _Roll) -> None:
        """Retire the roll's old workers once the frontend routes to every new one (or
        ``ROUTED_WAIT_S`` passed); none when a new worker did not start."""
        if roll.failed:
            self._roll, self.record.rolling = None, ""
            self._save()
            return
        try:
            loads = parse_worker_loads(json.loads(self._fetch(f"{self._base}/readyz", 2.0)))
        except (OSError, ValueError):
            return  # the frontend answers next round
        routed = all(a in loads and loads[a].ready for a in roll.new)
        if not routed and self._clock() - roll.started_at < ROUTED_WAIT_S:
            return
        roll.retired = True
        for r in roll.rolls:
            if not r.retire:
                continue
            old = [w for w in self._target.workers(r.role) if w.name in roll.old[r.role]]
            names = (
                [w.name for w in old] if r.replace else choose_local_victims(old, loads, r.retire)
            )
            for spec in self._target.retire(names):
                roll.draining.add(spec.name)
                self._drainer.start(spec.name, spec.address)
        self._finish_roll_if_done()

    def _collect_drains(self) -> None:
        finished = self._drainer.collect()
        if not finished:
            return
        self._target.stop_retired([r.name for r in finished])
        for result in finished:
            self._progress(
                f"planning: {result.name} drained in {result.seconds:.1f}s "
                f"({result.in_flight_left} in flight left); stopped"
            )
            if self._roll is not None:
                self._roll.draining.discard(result.name)
        self._finish_roll_if_done()

    def _finish_roll_if_done(self) -> None:
        roll = self._roll
        if roll is None or not roll.retired or roll.draining:
            return
        self._roll = None
        self.record.rollouts += 1
        self.record.rolling = ""
        self._progress(f"planning: rolled to {self.record.shape}")
        self._save()

    def _save(self) -> None:
        write_record(self._state_dir, self.record)
