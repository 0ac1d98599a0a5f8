"""Re-planning from the served workload, through the reconciler: the frontend's own length
histograms (a real FrontendMetrics registry, exposed and parsed) feed the watcher; a shift
that lasts a window re-plans once, for the observed workload, and status shows planned
against observed; a restarted operator keeps the adopted workload without planning again,
and an edited spec.workload replaces it. The API server is the in-memory stand-in of
test_planning_reconcile; the planner is a fake that records what it was asked."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from tandem.api.v1alpha1 import (
    InferenceCluster,
    PlanningMode,
    PlanningSpec,
    ReplanSpec,
    RequestRateSpec,
    WorkloadSpec,
)
from tandem.frontend.metrics import FrontendMetrics
from tandem.sim.workload_observation import LengthCounts, parse_length_counts
from tandem_operator import reasons
from tandem_operator.controller import Reconciler
from tandem_operator.kube.informer import Caches, Store
from tandem_operator.planning.service import PlanService
from tandem_operator.planning.watcher import WorkloadWatcher
from tandem_operator.render.pods import RenderSettings

from .test_planning import KEY, Enqueued, SlowPlanner, _spec
from .test_planning_reconcile import KINDS, FakeApiServer

START = datetime(2026, 1, 1, tzinfo=UTC)


class Frontend:
    """One frontend's metrics registry; the watcher reads it as the operator would."""

    def __init__(self) -> None:
        self.metrics = FrontendMetrics(CollectorRegistry())

    def serve(self, requests: int, isl: int, osl: int) -> None:
        for _ in range(requests):
            self.metrics.prompt_length.observe(isl)
            self.metrics.answer_length.observe(osl)

    async def length_counts(
        self, cr: InferenceCluster, frontend_pods: Sequence[dict[str, Any]]
    ) -> dict[str, LengthCounts]:
        text = generate_latest(self.metrics.registry).decode()
        return {"http://127.0.0.1:8000": parse_length_counts(text)}


class World:
    def __init__(self) -> None:
        spec = _spec(PlanningMode.AUTO).model_copy(
            update={
                "planning": PlanningSpec(
                    mode=PlanningMode.AUTO,
                    replan=ReplanSpec(window_seconds=60, min_interval_seconds=600),
                )
            }
        )
        self.server, self.planner, self.enqueued = FakeApiServer(), SlowPlanner(), Enqueued()
        self.planner.release.set()  # plans at once
        self.caches = Caches({kind: Store() for kind in KINDS})
        self.frontend = Frontend()
        self.now = START
        self.put({
            "apiVersion": "tandem.dev/v1alpha1", "kind": "InferenceCluster",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u", "generation": 1,
                         "resourceVersion": "0"},
            "spec": spec.to_wire(),
        })  # fmt: skip
        self.start_operator()

    def put(self, cluster: dict[str, Any]) -> None:
        self.server.objects[("InferenceCluster", "c")] = cluster
        self.caches.of("InferenceCluster").upsert(cluster)

    def start_operator(self) -> None:
        """A fresh operator (memory lost, status kept)."""
        self.plans = PlanService(self.planner, self.enqueued)
        self.watcher = WorkloadWatcher(
            self.caches, self.frontend, enqueue=self.enqueued, now=lambda: self.now
        )
        self.reconciler = Reconciler(
            self.server,  # type: ignore[arg-type]
            self.caches,
            RenderSettings(),
            identity="test",
            now=lambda: self.now,
            plans=self.plans,
            workloads=self.watcher,
        )

    async def reconcile_until_planned(self) -> dict[str, Any]:
        """Reconcile, let the plan be made, reconcile again; the cluster as stored."""
        running = asyncio.create_task(self.plans.run())
        try:
            await self.reconcile()
            await asyncio.sleep(0.05)  # the fake planner answers at once
            await self.reconcile()
        finally:
            running.cancel()
        return self.server.objects[("InferenceCluster", "c")]

    async def reconcile(self) -> None:
        await asyncio.wait_for(self.reconciler.reconcile(KEY), 10)
        self.caches.of("InferenceCluster").upsert(self.server.objects[("InferenceCluster", "c")])

    async def traffic(self, seconds: int, isl: int, osl: int, per_tick: int = 20) -> None:
        """``per_tick`` requests every 15 s for ``seconds``, observed after each tick."""
        for _ in range(seconds // 15):
            self.now += timedelta(seconds=15)
            self.frontend.serve(per_tick, isl, osl)
            await self.watcher.observe_all()


async def test_a_lasting_shift_re_plans_for_the_observed_workload_and_survives_a_restart() -> None:
    world = World()
    await world.watcher.observe_all()  # the first scrape: the window's start
    await world.traffic(120, isl=1000, osl=250)
    cluster = await world.reconcile_until_planned()
    status = cluster["status"]["workload"]
    assert status["planned"]["source"] == "spec"
    assert (status["planned"]["isl"], status["planned"]["osl"]) == (1024, 256)
    assert 813 < status["observed"]["islP50"] <= 1024
    assert "outside" not in status
    assert [s.workload.isl for s in world.planner.asked if s.workload] == [1024]

    # 32k prompts from now on: outside once they are the window's median, re-planned a
    # window (60 s) later, not before.
    world.enqueued.keys.clear()
    await world.traffic(30, isl=32000, osl=1000)
    assert world.watcher.planned_workload(KEY, _cluster(world)).isl == 1024  # type: ignore[union-attr]
    await world.traffic(90, isl=32000, osl=1000)
    adopted = world.watcher.planned_workload(KEY, _cluster(world))
    assert adopted is not None and 26008 < adopted.isl <= 32768
    # The histogram the planner draws from: 32000's bucket, at its upper bound.
    assert [b.tokens for b in adopted.isl_histogram or []] == [32768]
    assert 813 < adopted.osl <= 1024
    assert adopted.requests_per_second == RequestRateSpec(max=2)  # 1.33 req/s is inside
    assert KEY in world.enqueued.keys

    cluster = await world.reconcile_until_planned()
    status = cluster["status"]["workload"]
    assert status["planned"]["source"] == "observed"
    assert status["planned"]["isl"] == adopted.isl
    assert status["replans"] == 1
    assert world.planner.asked[-1].workload == adopted
    assert cluster["status"]["plan"]["specHash"] != ""
    replanning = [e for e in world.server.events if e["reason"] == reasons.EVENT_REPLANNING]
    assert len(replanning) == 1
    assert f"ISL {adopted.isl}" in replanning[0]["message"]

    # A restarted operator keeps the adopted workload and its plan: nothing planned again.
    asked = len(world.planner.asked)
    world.start_operator()
    cluster = await world.reconcile_until_planned()
    assert cluster["status"]["workload"]["planned"]["isl"] == adopted.isl
    assert world.watcher.planned_workload(KEY, _cluster(world)) == adopted
    assert cluster["status"]["workload"]["replans"] == 1
    assert len(world.planner.asked) == asked

    # An edited spec.workload replaces the adopted one, and is planned for.
    edited = _cluster(world).spec.model_copy(
        update={
            "workload": WorkloadSpec(isl=8000, osl=500, requests_per_second=RequestRateSpec(max=1))
        }
    )
    world.put({**cluster, "spec": edited.to_wire()})
    cluster = await world.reconcile_until_planned()
    assert cluster["status"]["workload"]["planned"]["source"] == "spec"
    assert cluster["status"]["workload"]["planned"]["isl"] == 8000
    assert world.planner.asked[-1].workload == edited.workload


async def test_a_cluster_created_again_under_its_name_inherits_no_re_plan() -> None:
    # Deleted and applied again between two scrapes: the watcher never saw it gone.
    world = World()
    await world.watcher.observe_all()
    await world.traffic(120, isl=1000, osl=250)
    first = (await world.reconcile_until_planned())["status"]["plan"]["specHash"]
    await world.traffic(150, isl=32000, osl=1000)
    cluster = await world.reconcile_until_planned()
    assert cluster["status"]["workload"]["replans"] == 1
    assert cluster["status"]["plan"]["specHash"] != first
    world.put({**cluster, "metadata": {**cluster["metadata"], "uid": "u2"}, "status": {}})
    cluster = await world.reconcile_until_planned()
    status = cluster["status"]["workload"]
    assert (status["planned"]["source"], status["planned"]["isl"]) == ("spec", 1024)
    assert status["replans"] == 0
    assert cluster["status"]["plan"]["specHash"] == first  # the plan for spec.workload


async def test_a_burst_shorter_than_the_window_plans_nothing_again() -> None:
    world = World()
    await world.watcher.observe_all()
    await world.traffic(120, isl=1000, osl=250)
    await world.reconcile_until_planned()
    await world.traffic(45, isl=32000, osl=1000, per_tick=40)  # outside for a moment
    await world.traffic(300, isl=1000, osl=250, per_tick=40)
    await world.reconcile_until_planned()
    status = world.server.objects[("InferenceCluster", "c")]["status"]["workload"]
    assert (status["planned"]["source"], status["replans"]) == ("spec", 0)
    assert [s.workload.isl for s in world.planner.asked if s.workload] == [1024]


async def test_check_mode_reports_the_observed_workload_and_never_re_plans() -> None:
    world = World()
    cluster = _cluster(world)
    spec = cluster.spec.model_copy(
        update={"planning": cluster.spec.planning.model_copy(update={"mode": PlanningMode.CHECK})}
    )
    world.put({**world.server.objects[("InferenceCluster", "c")], "spec": spec.to_wire()})
    await world.watcher.observe_all()
    await world.traffic(300, isl=32000, osl=1000)
    cluster_obj = await world.reconcile_until_planned()
    status = cluster_obj["status"]["workload"]
    assert status["planned"]["source"] == "spec"
    assert status["outside"].startswith("median prompt")
    assert status["replans"] == 0


def _cluster(world: World) -> InferenceCluster:
    return InferenceCluster.model_validate(world.server.objects[("InferenceCluster", "c")])
