"""One planned cluster's workload over time (pure): what the operator's watcher and
``tandem up``'s re-planner both keep.

A :class:`WorkloadTrack` holds the workload the current plan is for (``spec.workload``,
or one adopted from observation), the frontends' length scrapes of the last
``planning.replan.windowSeconds`` (and the one just before them, the window's start),
what that window observed (``workload_observation``) and the re-plan hysteresis
(``replanning``). Its owner reads the frontends and calls :meth:`WorkloadTrack.observe`
with each scrape; when the step says re-plan, the track has already adopted the observed
workload, and the owner plans the spec with it (:meth:`WorkloadTrack.planned_spec`).
The clock is the caller's (wall seconds): nothing here reads time or the network.
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime

from tandem.api.v1alpha1 import (
    InferenceClusterSpec,
    ObservedWorkload,
    PlannedWorkload,
    PlanningMode,
    PlanningSpec,
    WorkloadSource,
    WorkloadSpec,
    WorkloadStatus,
)
from tandem.sim.replanning import ReplanState, adopt, step
from tandem.sim.workload_observation import LengthCounts, ObservedLengths, observe_between


def compute_workload_hash(workload: WorkloadSpec) -> str:
    text = workload.model_dump_json(by_alias=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class TrackStep:
    """What one observation changed."""

    replan: bool  # the track adopted the observed workload: plan again
    outside: str | None  # how the window is outside the plan; None inside
    changed: bool  # the workload left or re-entered the plan


@dataclass(slots=True)
class WorkloadTrack:
    spec_hash: str  # of spec.workload, when ``planned`` was set
    planned: WorkloadSpec
    source: WorkloadSource
    state: ReplanState = field(default_factory=ReplanState)
    scrapes: deque[tuple[float, dict[str, LengthCounts]]] = field(default_factory=deque)
    seen: ObservedLengths | None = None
    seen_at: float | None = None
    outside: str | None = None

    @classmethod
    def of(cls, workload: WorkloadSpec, state: ReplanState | None = None) -> WorkloadTrack:
        """A track planning for ``spec.workload`` as written."""
        return cls(
            compute_workload_hash(workload), workload, WorkloadSource.SPEC, state or ReplanState()
        )

    def restart(self, workload: WorkloadSpec) -> None:
        """``spec.workload`` was edited: plan for it, keeping the re-plan history (the
        interval between re-plans still holds)."""
        self.spec_hash = compute_workload_hash(workload)
        self.planned, self.source = workload, WorkloadSource.SPEC
        self.state = ReplanState(
            last_replan_at=self.state.last_replan_at, replans=self.state.replans
        )
        self.outside = None

    def observe(
        self, planning: PlanningSpec, now: float, counts: dict[str, LengthCounts]
    ) -> TrackStep:
        """Record one scrape of every frontend taken at ``now`` and step the hysteresis;
        under ``check`` it only reports (never re-plans)."""
        self._record(now, counts, planning.replan.window_seconds)
        replan = planning.replan
        if planning.mode is not PlanningMode.AUTO:
            replan = replan.model_copy(update={"enabled": False})
        verdict = step(self.state, replan, self.planned, self.seen, now)
        changed = (verdict.outside is None) != (self.outside is None)
        self.state, self.outside = verdict.state, verdict.outside
        if verdict.replan and self.seen is not None:
            self.planned = adopt(self.planned, self.seen)
            self.source = WorkloadSource.OBSERVED
            self.outside = None
            return TrackStep(replan=True, outside=verdict.outside, changed=True)
        return TrackStep(replan=False, outside=verdict.outside, changed=changed)

    def planned_spec(self, spec: InferenceClusterSpec) -> InferenceClusterSpec:
        """``spec`` with the workload this track plans for."""
        if spec.workload == self.planned:
            return spec
        return spec.model_copy(update={"workload": self.planned})

    def status(self) -> WorkloadStatus:
        """``status.workload``: planned against observed."""
        seen, state = self.seen, self.state
        return WorkloadStatus(
            planned=PlannedWorkload(
                isl=self.planned.isl,
                osl=self.planned.osl,
                isl_p90=self.planned.isl_p90,
                osl_p90=self.planned.osl_p90,
                isl_histogram=self.planned.isl_histogram,
                osl_histogram=self.planned.osl_histogram,
                requests_per_second=self.planned.requests_per_second,
                source=self.source,
                spec_hash=self.spec_hash,
            ),
            observed=None
            if seen is None or self.seen_at is None
            else ObservedWorkload(
                isl_p50=seen.isl_p50,
                isl_p90=seen.isl_p90,
                osl_p50=seen.osl_p50,
                osl_p90=seen.osl_p90,
                requests_per_second=round(seen.requests_per_second, 3),
                requests=seen.requests,
                window_seconds=round(seen.window_seconds, 1),
                time=format_time(self.seen_at),
            ),
            outside=self.outside,
            outside_since=format_time_or_none(state.outside_since if self.outside else None),
            replans=state.replans,
            last_replan_time=format_time_or_none(state.last_replan_at),
        )

    def _record(self, now: float, counts: dict[str, LengthCounts], window_s: float) -> None:
        """Keep the scrapes of the last window (and the one just before it, the window's
        start) and observe between the oldest and this one."""
        scrapes = self.scrapes
        scrapes.append((now, counts))
        while len(scrapes) > 2 and scrapes[1][0] <= now - window_s:
            scrapes.popleft()
        start, first = scrapes[0]
        seen = observe_between(first, counts, now - start)
        self.seen, self.seen_at = (seen, now) if seen is not None else (None, None)


def format_time(seconds: float) -> str:
    """RFC 3339, UTC, to the second (as status times are written)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_time_or_none(seconds: float | None) -> str | None:
    return None if seconds is None else format_time(seconds)


def parse_time(text: str | None) -> float | None:
    """:func:`format_time`'s inverse; None for nothing or garbage."""
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None
