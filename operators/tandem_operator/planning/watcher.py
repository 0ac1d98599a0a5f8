"""The workload each planned cluster really serves, and when it calls for a new plan.

Leader only, like the autoscaler. Every ``SCRAPE_SECONDS`` the watcher reads the prompt
and answer length histograms of each cluster with planning check or auto from its
frontends (``MetricsSource.length_counts``), keeps the scrapes of the last
``planning.replan.windowSeconds``, observes that window
(``tandem.sim.workload_observation``) and steps the hysteresis (``tandem.sim.replanning``).

It writes nothing itself. The reconciler asks it which workload to plan for
(:meth:`planned_workload`: spec.workload, or the observed one it adopted) and what to show
in ``status.workload`` (:meth:`workload_status`); the watcher enqueues a cluster when a
re-plan is due, when its workload leaves or re-enters the plan, and every
``REPORT_SECONDS`` to refresh the observed figures. The plan service then plans the spec
with the adopted workload (a new spec hash), and the reconciler rolls the new shape the
way every spec change rolls. A restarted operator takes the adopted workload and the
re-plan history from status: it neither forgets a re-plan nor re-plans before the
interval is up. An edited spec.workload replaces an adopted one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from tandem.api.v1alpha1 import (
    InferenceCluster,
    ObservedWorkload,
    PlannedWorkload,
    PlanningMode,
    WorkloadSource,
    WorkloadSpec,
    WorkloadStatus,
)
from tandem.sim.replanning import ReplanState, adopt, step
from tandem.sim.workload_observation import LengthCounts, ObservedLengths, observe_between
from tandem_operator import names
from tandem_operator.kube.informer import Caches, Key
from tandem_operator.problems import RecurringProblem
from tandem_operator.scaling.metrics_source import ScrapeError
from tandem_operator.status.observe import InvalidObject, parse_cluster

logger = logging.getLogger(__name__)

Manifest = dict[str, Any]

# How often the frontends' length histograms are read: a window holds 20 or more scrapes.
SCRAPE_SECONDS = 15.0
# How often the observed figures in status are refreshed when nothing else changes.
REPORT_SECONDS = 60.0


class LengthSource(Protocol):
    async def length_counts(
        self, cr: InferenceCluster, frontend_pods: Sequence[Manifest]
    ) -> dict[str, LengthCounts]: ...


@dataclass(slots=True)
class _Watch:
    # The object watched: one deleted and created again under its name between two
    # scrapes is another cluster, and inherits nothing (adopted workload, re-plans).
    uid: str | None
    spec_hash: str  # of spec.workload, when ``planned`` was set
    planned: WorkloadSpec
    source: WorkloadSource
    state: ReplanState = field(default_factory=ReplanState)
    scrapes: deque[tuple[float, dict[str, LengthCounts]]] = field(default_factory=deque)
    seen: ObservedLengths | None = None
    seen_at: float | None = None
    outside: str | None = None
    reported_at: float | None = None
    problem: RecurringProblem = field(default_factory=lambda: RecurringProblem(logger))


def compute_workload_hash(workload: WorkloadSpec) -> str:
    text = workload.model_dump_json(by_alias=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class WorkloadWatcher:
    def __init__(
        self,
        caches: Caches,
        source: LengthSource,
        *,
        enqueue: Callable[[Key], None],
        now: Callable[[], datetime],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        period_s: float = SCRAPE_SECONDS,
    ) -> None:
        self._caches = caches
        self._source = source
        self._enqueue = enqueue
        self._now = now
        self._sleep = sleep
        self._period_s = period_s
        self._watches: dict[Key, _Watch] = {}

    # ------------------------------------------------------------------ the reconciler's view

    def planned_workload(self, key: Key, cr: InferenceCluster) -> WorkloadSpec | None:
        """The workload to plan ``cr`` for; None without planning."""
        watch = self._watch(key, cr)
        return watch.planned if watch is not None else None

    def workload_status(self, key: Key, cr: InferenceCluster) -> WorkloadStatus | None:
        """``status.workload``: planned against observed; None without planning."""
        watch = self._watch(key, cr)
        if watch is None:
            return None
        seen, state = watch.seen, watch.state
        return WorkloadStatus(
            planned=PlannedWorkload(
                isl=watch.planned.isl,
                osl=watch.planned.osl,
                isl_p90=watch.planned.isl_p90,
                osl_p90=watch.planned.osl_p90,
                requests_per_second=watch.planned.requests_per_second,
                source=watch.source,
                spec_hash=watch.spec_hash,
            ),
            observed=None
            if seen is None or watch.seen_at is None
            else ObservedWorkload(
                isl_p50=seen.isl_p50,
                isl_p90=seen.isl_p90,
                osl_p50=seen.osl_p50,
                osl_p90=seen.osl_p90,
                requests_per_second=round(seen.requests_per_second, 3),
                requests=seen.requests,
                window_seconds=round(seen.window_seconds, 1),
                time=_rfc3339(watch.seen_at),
            ),
            outside=watch.outside,
            outside_since=_rfc3339_or_none(state.outside_since if watch.outside else None),
            replans=state.replans,
            last_replan_time=_rfc3339_or_none(state.last_replan_at),
        )

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        while True:
            await self.observe_all()
            await self._sleep(self._period_s)

    async def observe_all(self) -> None:
        """One round: every planned cluster's frontends read once, concurrently."""
        clusters = []
        for obj in self._caches.of("InferenceCluster").items():
            meta = obj["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            with contextlib.suppress(InvalidObject):  # the reconciler reports invalid specs
                clusters.append(((meta.get("namespace", ""), meta["name"]), parse_cluster(obj)))
        for gone in set(self._watches) - {key for key, _ in clusters}:
            del self._watches[gone]
        await asyncio.gather(*(self._observe(key, cr) for key, cr in clusters))

    async def _observe(self, key: Key, cr: InferenceCluster) -> None:
        watch = self._watch(key, cr)
        if watch is None:
            return
        pods = self._caches.of("Pod").for_cluster(*key)
        frontends = [
            p
            for p in pods
            if (p["metadata"].get("labels") or {}).get(names.LABEL_ROLE) == names.FRONTEND
        ]
        try:
            counts = await self._source.length_counts(cr, frontends)
        except ScrapeError as exc:
            watch.problem.report(f"[{key[0]}/{key[1]}] workload not observed: {exc}")
            return
        watch.problem.resolve(f"[{key[0]}/{key[1]}] workload observed again")
        now = self._now().timestamp()
        self._record(watch, now, counts, cr.spec.planning.replan.window_seconds)
        replan = cr.spec.planning.replan
        if cr.spec.planning.mode is not PlanningMode.AUTO:
            replan = replan.model_copy(update={"enabled": False})  # check: report only
        verdict = step(watch.state, replan, watch.planned, watch.seen, now)
        changed = (verdict.outside is None) != (watch.outside is None)
        watch.state, watch.outside = verdict.state, verdict.outside
        if verdict.replan and watch.seen is not None:
            watch.planned = adopt(watch.planned, watch.seen)
            watch.source = WorkloadSource.OBSERVED
            watch.outside = None
            logger.info(
                "[%s/%s] the workload left the plan for %ds (%s): re-planning for ISL %d, "
                "OSL %d, up to %g req/s",
                *key,
                replan.window_seconds,
                verdict.outside,
                watch.planned.isl,
                watch.planned.osl,
                watch.planned.requests_per_second.max,
            )
        stale = watch.reported_at is None or now - watch.reported_at >= REPORT_SECONDS
        if verdict.replan or changed or stale:
            watch.reported_at = now
            self._enqueue(key)

    @staticmethod
    def _record(
        watch: _Watch, now: float, counts: dict[str, LengthCounts], window_s: float
    ) -> None:
        """Keep the scrapes of the last window (and the one just before it, the window's
        start) and observe between the oldest and this one."""
        scrapes = watch.scrapes
        scrapes.append((now, counts))
        while len(scrapes) > 2 and scrapes[1][0] <= now - window_s:
            scrapes.popleft()
        start, first = scrapes[0]
        seen = observe_between(first, counts, now - start)
        if seen is not None:
            watch.seen, watch.seen_at = seen, now
        else:
            watch.seen, watch.seen_at = None, None

    # ------------------------------------------------------------------ state

    def _watch(self, key: Key, cr: InferenceCluster) -> _Watch | None:
        spec = cr.spec
        if spec.planning.mode is PlanningMode.OFF or spec.workload is None:
            self._watches.pop(key, None)
            return None
        spec_hash = compute_workload_hash(spec.workload)
        watch = self._watches.get(key)
        if watch is not None and watch.uid != cr.metadata.uid:
            watch = None
        if watch is not None and watch.spec_hash == spec_hash:
            return watch
        if watch is not None:  # spec.workload was edited: plan for it, keep the history
            watch.spec_hash, watch.planned, watch.source = (
                spec_hash,
                spec.workload,
                WorkloadSource.SPEC,
            )
            watch.state = ReplanState(
                last_replan_at=watch.state.last_replan_at, replans=watch.state.replans
            )
            watch.outside = None
            return watch
        watch = _restore(spec_hash, spec.workload, cr)
        self._watches[key] = watch
        return watch


def _restore(spec_hash: str, workload: WorkloadSpec, cr: InferenceCluster) -> _Watch:
    """A watch for a cluster this operator has not watched yet: from status when it is
    for this spec.workload (the operator restarted), else from the spec."""
    uid = cr.metadata.uid
    last = cr.status.workload if cr.status is not None else None
    if last is None:
        return _Watch(uid, spec_hash, workload, WorkloadSource.SPEC)
    state = ReplanState(last_replan_at=_parse_time(last.last_replan_time), replans=last.replans)
    if last.planned.spec_hash != spec_hash:
        return _Watch(uid, spec_hash, workload, WorkloadSource.SPEC, state)
    planned = workload.model_copy(
        update={
            "isl": last.planned.isl,
            "osl": last.planned.osl,
            "isl_p90": last.planned.isl_p90,
            "osl_p90": last.planned.osl_p90,
            "requests_per_second": last.planned.requests_per_second,
        }
    )
    return _Watch(uid, spec_hash, planned, last.planned.source, state)


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rfc3339_or_none(seconds: float | None) -> str | None:
    return None if seconds is None else _rfc3339(seconds)


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None
