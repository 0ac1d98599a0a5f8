"""The workload each planned cluster really serves, and when it calls for a new plan.

Leader only, like the autoscaler. Every ``SCRAPE_SECONDS`` the watcher reads the prompt
and answer length histograms of each cluster with planning check or auto from its
frontends (``MetricsSource.length_counts``) into the cluster's
``tandem.sim.workload_tracking.WorkloadTrack`` (the window of scrapes, what it observed,
the re-plan hysteresis: the same track ``tandem up`` keeps).

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
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from tandem.api.v1alpha1 import InferenceCluster, PlanningMode, WorkloadSpec, WorkloadStatus
from tandem.sim.replanning import ReplanState
from tandem.sim.workload_observation import LengthCounts
from tandem.sim.workload_tracking import WorkloadTrack, compute_workload_hash, parse_time
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
    track: WorkloadTrack
    reported_at: float | None = None
    problem: RecurringProblem = field(default_factory=lambda: RecurringProblem(logger))


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
        return watch.track.planned if watch is not None else None

    def workload_status(self, key: Key, cr: InferenceCluster) -> WorkloadStatus | None:
        """``status.workload``: planned against observed; None without planning."""
        watch = self._watch(key, cr)
        return watch.track.status() if watch is not None else None

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
        track = watch.track
        verdict = track.observe(cr.spec.planning, now, counts)
        if verdict.replan:
            replan = cr.spec.planning.replan
            logger.info(
                "[%s/%s] the workload left the plan for %ds (%s): re-planning for ISL %d, "
                "OSL %d, up to %g req/s",
                *key,
                replan.window_seconds,
                verdict.outside,
                track.planned.isl,
                track.planned.osl,
                track.planned.requests_per_second.max,
            )
        stale = watch.reported_at is None or now - watch.reported_at >= REPORT_SECONDS
        if verdict.changed or stale:
            watch.reported_at = now
            self._enqueue(key)

    # ------------------------------------------------------------------ state

    def _watch(self, key: Key, cr: InferenceCluster) -> _Watch | None:
        spec = cr.spec
        if spec.planning.mode is PlanningMode.OFF or spec.workload is None:
            self._watches.pop(key, None)
            return None
        watch = self._watches.get(key)
        if watch is not None and watch.uid != cr.metadata.uid:
            watch = None
        if watch is not None:
            if watch.track.spec_hash != compute_workload_hash(spec.workload):
                watch.track.restart(spec.workload)  # spec.workload was edited
            return watch
        watch = _Watch(cr.metadata.uid, _restore(spec.workload, cr))
        self._watches[key] = watch
        return watch


def _restore(workload: WorkloadSpec, cr: InferenceCluster) -> WorkloadTrack:
    """The track of a cluster this operator has not watched yet: from status when it is
    for this spec.workload (the operator restarted), else from the spec."""
    last = cr.status.workload if cr.status is not None else None
    if last is None:
        return WorkloadTrack.of(workload)
    state = ReplanState(last_replan_at=parse_time(last.last_replan_time), replans=last.replans)
    track = WorkloadTrack.of(workload, state)
    if last.planned.spec_hash != track.spec_hash:
        return track
    track.planned = workload.model_copy(
        update={
            "isl": last.planned.isl,
            "osl": last.planned.osl,
            "isl_p90": last.planned.isl_p90,
            "osl_p90": last.planned.osl_p90,
            "isl_histogram": last.planned.isl_histogram,
            "osl_histogram": last.planned.osl_histogram,
            "requests_per_second": last.planned.requests_per_second,
        }
    )
    track.source = last.planned.source
    return track
