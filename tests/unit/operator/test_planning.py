"""Planning beside the reconciles: plans cached by spec hash and made in the background
(a fake planner the test releases), the child process that makes them (killed past its
limit), and the SloPredicted condition and Event they turn into (pure)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from tandem.api.v1alpha1 import (
    InferenceClusterSpec,
    InferenceClusterStatus,
    PlannedPool,
    PlanningMode,
    PlanningSpec,
    PlanOutcome,
    PlanStatus,
    RequestRateSpec,
    SloSpec,
    WorkloadSpec,
)
from tandem.api.validate import load_inference_cluster
from tandem.sim.spec_plan import compute_spec_hash
from tandem_operator import reasons
from tandem_operator.kube.informer import Key
from tandem_operator.planning.runner import PlanningFailed, ProcessPlanner
from tandem_operator.planning.service import PlanService
from tandem_operator.status.compute import StatusResult, compute_status
from tandem_operator.status.observe import PlanObservation

from .test_status import NOW, conditions, make_cr, observed

EXAMPLE = Path(__file__).parents[3] / "manifests" / "examples" / "simulated-gpt-oss-120b-gb200.yaml"
REFERENCE = EXAMPLE.parent / "reference-cpu.yaml"
KEY: Key = ("ns", "c")


def _spec(mode: PlanningMode = PlanningMode.AUTO, rate: float = 2.0) -> InferenceClusterSpec:
    return load_inference_cluster(EXAMPLE).spec.model_copy(
        update={
            "slo": SloSpec(ttft_p90_seconds=2, itl_p90_seconds=0.006),
            "workload": WorkloadSpec(
                isl=1024, osl=256, requests_per_second=RequestRateSpec(max=rate)
            ),
            "planning": PlanningSpec(mode=mode),
        }
    )


def _plan(
    spec: InferenceClusterSpec,
    outcome: PlanOutcome = PlanOutcome.MET,
    perf_table: str | None = None,
) -> PlanStatus:
    return PlanStatus(
        spec_hash=compute_spec_hash(spec, perf_table), mode=spec.planning.mode, outcome=outcome,
        shape="2(TP1) agg", decode=PlannedPool(workers=2, tensor_parallel_size=1),
        message=f"planned at {spec.workload.requests_per_second.max if spec.workload else 0:g}",
    )  # fmt: skip


class SlowPlanner:
    """Plans only when the test says so; counts what it was asked."""

    def __init__(self) -> None:
        self.asked: list[InferenceClusterSpec] = []
        self.tables: list[str | None] = []
        self.release = asyncio.Event()
        self.fail: str | None = None

    async def __call__(self, spec: InferenceClusterSpec, perf_table: str | None) -> PlanStatus:
        self.asked.append(spec)
        self.tables.append(perf_table)
        await self.release.wait()
        if self.fail is not None:
            raise PlanningFailed(self.fail)
        return _plan(spec, perf_table=perf_table)


class Enqueued:
    def __init__(self) -> None:
        self.keys: list[Key] = []
        self.event = asyncio.Event()

    def __call__(self, key: Key) -> None:
        self.keys.append(key)
        self.event.set()


@pytest.fixture
async def service() -> AsyncIterator[tuple[PlanService, SlowPlanner, Enqueued]]:
    planner, enqueued = SlowPlanner(), Enqueued()
    plans = PlanService(planner, enqueued)
    task = asyncio.create_task(plans.run())
    yield plans, planner, enqueued
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_lookup_never_waits_and_the_cluster_is_woken_once_planned(
    service: tuple[PlanService, SlowPlanner, Enqueued],
) -> None:
    plans, planner, enqueued = service
    spec = _spec()
    # The planner has not answered (and will not until released): lookups answer at once.
    assert plans.lookup(KEY, spec, None) is None
    assert plans.lookup(("ns", "twin"), spec, None) is None  # same hash: the same plan
    await asyncio.sleep(0)  # let a worker pick the request up
    assert len(planner.asked) == 1 and enqueued.keys == []
    planner.release.set()
    await asyncio.wait_for(enqueued.event.wait(), 5)
    assert sorted(enqueued.keys) == [("ns", "c"), ("ns", "twin")]
    assert plans.lookup(KEY, spec, None) == _plan(spec)
    assert len(planner.asked) == 1  # cached: not planned again


async def test_a_changed_workload_plans_again_and_an_unrelated_change_does_not(
    service: tuple[PlanService, SlowPlanner, Enqueued],
) -> None:
    plans, planner, enqueued = service
    planner.release.set()
    spec = _spec()
    plans.lookup(KEY, spec, None)
    await asyncio.wait_for(enqueued.event.wait(), 5)
    scaled = spec.model_copy(update={"frontend": spec.frontend.model_copy(update={"replicas": 4})})
    assert plans.lookup(KEY, scaled, None) == _plan(spec)
    busier = _spec(rate=8)
    enqueued.event.clear()
    assert plans.lookup(KEY, busier, None) is None
    await asyncio.wait_for(enqueued.event.wait(), 5)
    assert plans.lookup(KEY, busier, None) == _plan(busier)
    assert [s.workload.requests_per_second.max for s in planner.asked if s.workload] == [2, 8]


async def test_a_plan_in_status_for_the_same_hash_is_reused_but_not_a_failure(
    service: tuple[PlanService, SlowPlanner, Enqueued],
) -> None:
    plans, planner, _ = service
    spec = _spec()
    assert plans.lookup(KEY, spec, _plan(spec)) == _plan(spec)  # e.g. after a restart
    assert plans.lookup(KEY, spec, _plan(_spec(rate=8))) == _plan(spec)
    other = _spec(PlanningMode.CHECK)
    assert plans.lookup(KEY, other, _plan(other, PlanOutcome.FAILED)) is None
    await asyncio.sleep(0)
    assert planner.asked == [other]


async def test_a_plan_that_did_not_come_back_is_reported_and_tried_again_later() -> None:
    planner, enqueued, now = SlowPlanner(), Enqueued(), [0.0]
    plans = PlanService(planner, enqueued, retry_s=0.2, clock=lambda: now[0])
    task = asyncio.create_task(plans.run())
    try:
        planner.fail = "planning gave up after 120 s"
        planner.release.set()
        spec = _spec()
        plans.lookup(KEY, spec, None)
        await asyncio.wait_for(enqueued.event.wait(), 5)
        failed = plans.lookup(KEY, spec, None)
        assert failed is not None and failed.outcome is PlanOutcome.FAILED
        assert failed.message == "planning gave up after 120 s; planning again in 0.2 s"
        # Not before the interval: the failure is what every lookup gets.
        assert plans.lookup(KEY, spec, None) == failed
        assert len(planner.asked) == 1
        # After it, the cluster is woken and its next lookup plans again.
        enqueued.event.clear()
        await asyncio.wait_for(enqueued.event.wait(), 5)
        assert enqueued.keys == [KEY, KEY]
        now[0] = 0.2
        planner.fail = None
        assert plans.lookup(KEY, spec, None) is None
        enqueued.event.clear()
        await asyncio.wait_for(enqueued.event.wait(), 5)
        planned = plans.lookup(KEY, spec, None)
        assert planned is not None and planned.outcome is PlanOutcome.MET
        assert len(planner.asked) == 2
    finally:
        task.cancel()


# ---------------------------------------------------------------- the child process


async def test_a_plan_past_its_limit_is_killed_while_the_loop_runs_on() -> None:
    # A child that never answers (it waits on an event nobody sets).
    never = (sys.executable, "-c", "import threading; threading.Event().wait()")
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.create_task(tick())
    with pytest.raises(PlanningFailed, match=r"planning gave up after 0\.5 s"):
        await ProcessPlanner(timeout_s=0.5, argv=never)(_spec(), None)
    ticker.cancel()
    assert ticks >= 10  # the event loop kept serving while the plan ran


async def test_a_crashing_planner_says_why() -> None:
    crash = (sys.executable, "-c", "raise SystemExit('no step-time table')")
    with pytest.raises(PlanningFailed, match="exited with 1: no step-time table"):
        await ProcessPlanner(timeout_s=30, argv=crash)(_spec(), None)


async def test_the_real_planner_runs_in_a_child_process() -> None:
    spec = _spec(PlanningMode.CHECK)
    plan = await ProcessPlanner(timeout_s=120)(spec, None)
    assert plan.spec_hash == compute_spec_hash(spec) and plan.mode is PlanningMode.CHECK
    assert plan.shape == "1P(TP1)+1D(TP1)" and plan.predicted is not None


# ---------------------------------------------------------------- status (pure)


def _checked(outcome: PlanOutcome, message: str) -> PlanStatus:
    spec = _spec(PlanningMode.CHECK)
    return _plan(spec, outcome).model_copy(update={"message": message})


def _status(
    spec: InferenceClusterSpec, plan: PlanObservation | None, before: PlanStatus | None = None
) -> StatusResult:
    cr = make_cr(InferenceClusterStatus(plan=before) if before else None)
    cr = cr.model_copy(update={"spec": spec})
    return compute_status(cr, replace(observed(), plan=plan), NOW)


def test_check_mode_names_the_percentile_that_misses() -> None:
    miss = (
        "ITL p90 7.9 ms > 6 ms at 2 req/s with the spec's shape (1 prefill TP1 + 1 decode TP1 "
        "workers)"
    )
    result = _status(
        _spec(PlanningMode.CHECK), PlanObservation(_checked(PlanOutcome.MISSED, miss), None)
    )
    condition = next(c for c in result.cluster.conditions if c.type == reasons.SLO_PREDICTED)
    assert (condition.status, condition.reason, condition.message) == (
        "False",
        reasons.SLO_MISSED,
        miss,
    )
    assert conditions(result)[reasons.READY][0] == "True"  # informational: never blocks Ready
    assert result.cluster.plan is not None and result.cluster.plan.message == miss
    assert [(e.type, e.reason) for e in result.events if e.message == miss] == [
        ("Warning", reasons.SLO_MISSED)
    ]


@pytest.mark.parametrize(
    ("mode", "before", "status", "reason", "words"),
    [
        (PlanningMode.AUTO, None, "Unknown", reasons.PLANNING, "hand-written shape is deployed"),
        (PlanningMode.AUTO, "met", "Unknown", reasons.PLANNING, "last plan (2(TP1) agg) stays"),
        (PlanningMode.CHECK, None, "Unknown", reasons.PLANNING, "predicting the spec's shape"),
    ],
)  # fmt: skip
def test_while_planning_the_condition_says_what_is_deployed(
    mode: PlanningMode, before: str | None, status: str, reason: str, words: str
) -> None:
    spec = _spec(mode, rate=8)
    previous = _plan(_spec(mode)) if before else None
    result = _status(spec, PlanObservation(None, previous), previous)
    assert conditions(result)[reasons.SLO_PREDICTED] == (status, reason)
    condition = next(c for c in result.cluster.conditions if c.type == reasons.SLO_PREDICTED)
    assert words in condition.message
    assert result.cluster.plan == previous  # the last plan stays in status meanwhile
    assert not [e for e in result.events if e.reason == reasons.EVENT_PLANNED]


def test_a_new_plan_is_announced_once() -> None:
    spec = _spec()
    plan = _plan(spec)
    first = _status(spec, PlanObservation(plan, None))
    assert conditions(first)[reasons.SLO_PREDICTED] == ("True", reasons.SLO_MET)
    assert [(e.type, e.reason, e.message) for e in first.events if e.reason == "Planned"] == [
        ("Normal", reasons.EVENT_PLANNED, plan.message)
    ]
    again = _status(spec, PlanObservation(plan, plan), plan)
    assert not [e for e in again.events if e.reason == reasons.EVENT_PLANNED]


def test_auto_without_a_deployment_that_meets_keeps_the_hand_written_shape() -> None:
    spec = _spec()
    plan = _plan(spec, PlanOutcome.MISSED).model_copy(update={"message": "no deployment can"})
    result = _status(spec, PlanObservation(plan, None))
    condition = next(c for c in result.cluster.conditions if c.type == reasons.SLO_PREDICTED)
    assert (condition.status, condition.reason) == ("False", reasons.SLO_MISSED)
    assert condition.message == "no deployment can; the hand-written shape is deployed"


def test_planning_off_has_no_condition_and_no_plan() -> None:
    result = _status(_spec(PlanningMode.OFF), None)
    assert reasons.SLO_PREDICTED not in conditions(result) and result.cluster.plan is None


async def test_the_planner_process_plans_from_the_table_it_is_handed() -> None:
    table = (Path(__file__).parents[2] / "data" / "perf-table-smollm2-cpu.json").read_text()
    spec = load_inference_cluster(REFERENCE).spec.model_copy(
        update={
            "slo": SloSpec(ttft_p90_seconds=10, itl_p90_seconds=0.5),
            "workload": WorkloadSpec(isl=256, osl=32, requests_per_second=RequestRateSpec(max=0.2)),
            "planning": PlanningSpec(mode=PlanningMode.AUTO),
        }
    )
    plan = await ProcessPlanner(timeout_s=120)(spec, table)
    assert plan.spec_hash == compute_spec_hash(spec, table)
    assert plan.outcome is PlanOutcome.MET, plan.message
