"""The ``SloPredicted`` condition and the plan's Event (pure), from a PlanObservation.

check mode predicts the hand-written shape, auto the planned one; either way the
condition says whether the planner expects ``spec.slo`` to hold at ``spec.workload``'s
highest rate, and names each percentile that misses.
"""

from __future__ import annotations

from tandem.api.v1alpha1 import (
    InferenceClusterSpec,
    PlanningMode,
    PlanOutcome,
    PlanStatus,
    WorkloadStatus,
)
from tandem.sim.planned_spec import apply_plan
from tandem_operator import reasons
from tandem_operator.render.profiling import ProfileFailed, Profiling
from tandem_operator.status.observe import PlanObservation

_BY_OUTCOME = {
    PlanOutcome.MET: ("True", reasons.SLO_MET),
    PlanOutcome.MISSED: ("False", reasons.SLO_MISSED),
    PlanOutcome.FAILED: ("Unknown", reasons.PLANNING_FAILED),
}


def compute_slo_condition(
    spec: InferenceClusterSpec, observation: PlanObservation
) -> tuple[str, str, str]:
    """(status, reason, message) of ``SloPredicted``."""
    plan, profile = observation.current, observation.profile
    if isinstance(profile, ProfileFailed):
        return "Unknown", reasons.PROFILING_FAILED, _keeping(spec, observation, profile.message)
    if isinstance(profile, Profiling):
        return "Unknown", reasons.PROFILING, _keeping(spec, observation, profile.message)
    if plan is None:
        return "Unknown", reasons.PLANNING, _while_planning(spec, observation.previous)
    status, reason = _BY_OUTCOME[plan.outcome]
    message = plan.message
    if spec.planning.mode is PlanningMode.AUTO and plan.outcome is not PlanOutcome.MET:
        message += "; the hand-written shape is deployed"
    return status, reason, message


def compute_plan_event(
    before: PlanStatus | None, after: PlanStatus | None
) -> tuple[str, str, str] | None:
    """(type, reason, message) of the Event for a plan new in status, if any."""
    if after is None or (before is not None and before.spec_hash == after.spec_hash):
        return None
    if after.outcome is PlanOutcome.MET:
        return "Normal", reasons.EVENT_PLANNED, after.message
    return "Warning", _BY_OUTCOME[after.outcome][1], after.message


def compute_replan_event(
    before: WorkloadStatus | None, after: WorkloadStatus | None
) -> tuple[str, str, str] | None:
    """(type, reason, message) of the Event for a re-plan new in status, if any."""
    if after is None or after.replans <= (before.replans if before is not None else 0):
        return None
    planned = after.planned
    return (
        "Normal",
        reasons.EVENT_REPLANNING,
        f"the observed workload left the plan (re-plan {after.replans}): planning for "
        f"ISL {planned.isl}, OSL {planned.osl}, up to "
        f"{planned.requests_per_second.max:g} req/s",
    )


def _keeping(spec: InferenceClusterSpec, observation: PlanObservation, message: str) -> str:
    """``message`` and which shape is deployed meanwhile."""
    previous = observation.previous
    if previous is not None and apply_plan(spec, previous) is not spec:
        return f"{message}; the last plan ({previous.shape}) stays deployed"
    return f"{message}; the hand-written shape is deployed"


def _while_planning(spec: InferenceClusterSpec, previous: PlanStatus | None) -> str:
    if spec.planning.mode is PlanningMode.CHECK:
        return "predicting the spec's shape for the changed spec"
    if previous is not None and apply_plan(spec, previous) is not spec:
        return f"planning the changed spec; the last plan ({previous.shape}) stays deployed"
    return "planning the spec; the hand-written shape is deployed until the plan is ready"
