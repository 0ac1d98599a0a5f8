"""A reference cluster on cpu under planning: the reconcile starts a profiling Job and
keeps the hand-written shape (SloPredicted Unknown, Profiling); once the Job completes,
its pod's table becomes ConfigMap C-perf-table and the plan is made from it. A failed
Job is reported once and not run again; a changed engine is profiled again. The API
server is the in-memory stand-in of test_planning_reconcile; the informers' part (the
Job's and pod's status) is played by the test."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tandem.api.v1alpha1 import (
    PlanningMode,
    PlanningSpec,
    RequestRateSpec,
    SloSpec,
    WorkloadSpec,
)
from tandem.api.validate import load_inference_cluster
from tandem.sim.spec_plan import compute_spec_hash
from tandem_operator import names, reasons
from tandem_operator.controller import Reconciler
from tandem_operator.kube.client import Resource
from tandem_operator.kube.informer import Caches, Store
from tandem_operator.planning.service import PlanService
from tandem_operator.render.pods import RenderSettings

from .test_planning import KEY, Enqueued, SlowPlanner
from .test_planning_reconcile import KINDS, FakeApiServer

Json = dict[str, Any]
EXAMPLE = Path(__file__).parents[3] / "manifests" / "examples" / "reference-cpu.yaml"
TABLE = (Path(__file__).parents[2] / "data" / "perf-table-smollm2-cpu.json").read_text()
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


class DeletingApiServer(FakeApiServer):
    """Remembers what was deleted, and deletes it."""

    def __init__(self) -> None:
        super().__init__()
        self.deleted: list[tuple[str, str]] = []

    async def delete(
        self, resource: Resource, namespace: str | None, name: str, *, uid: str | None = None
    ) -> bool:
        self.deleted.append((resource.kind, name))
        return self.objects.pop((resource.kind, name), None) is not None


class World:
    def __init__(self) -> None:
        self.server, self.planner, self.enqueued = DeletingApiServer(), SlowPlanner(), Enqueued()
        self.caches = Caches({kind: Store() for kind in KINDS})
        self.generation = 0
        self.set_spec()
        self.plans = PlanService(self.planner, self.enqueued)
        self.reconciler = Reconciler(
            self.server,  # type: ignore[arg-type]
            self.caches,
            RenderSettings(),
            identity="test",
            now=lambda: NOW,
            plans=self.plans,
        )

    def set_spec(self, planning: PlanningSpec | None = None, **decode: Any) -> None:
        spec = load_inference_cluster(EXAMPLE).spec
        spec = spec.model_copy(
            update={
                "slo": SloSpec(ttft_p90_seconds=10, itl_p90_seconds=0.5),
                "workload": WorkloadSpec(
                    isl=256, osl=32, requests_per_second=RequestRateSpec(max=0.2)
                ),
                "planning": planning or PlanningSpec(mode=PlanningMode.AUTO),
                "decode": spec.decode.model_copy(update=decode),
            }
        )
        self.generation += 1
        live = self.caches.of("InferenceCluster").get(*KEY) or {}
        cluster = {
            "apiVersion": "tandem.dev/v1alpha1", "kind": "InferenceCluster",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u",
                         "generation": self.generation, "resourceVersion": str(self.generation)},
            "spec": spec.to_wire(), "status": live.get("status", {}),
        }  # fmt: skip
        self.spec = spec
        self.server.objects[("InferenceCluster", "c")] = cluster
        self.caches.of("InferenceCluster").upsert(cluster)

    async def reconcile(self) -> None:
        await asyncio.wait_for(self.reconciler.reconcile(KEY), 10)
        # The status the reconcile wrote, as the informer would bring it back.
        cached = self.caches.of("InferenceCluster").get(*KEY)
        assert cached is not None
        status = self.server.objects[("InferenceCluster", "c")]["status"]
        self.caches.of("InferenceCluster").upsert({**cached, "status": status})

    def job(self) -> Json:
        job = self.caches.of("Job").get("ns", "c-profile")
        assert job is not None
        return job

    def finish_job(self, condition: Json, exit_code: int, message: str) -> None:
        """The Job controller and the kubelet at work: the pod ended, the Job with it."""
        job = self.job()
        self.caches.of("Job").upsert({**job, "status": {"conditions": [condition]}})
        terminated = {"exitCode": exit_code, "message": message}
        self.caches.of("Pod").upsert({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "c-profile-x7k2p", "namespace": "ns", "resourceVersion": "1",
                         "labels": job["spec"]["template"]["metadata"]["labels"],
                         "ownerReferences": [{"kind": "Job", "uid": job["metadata"]["uid"]}]},
            "status": {"containerStatuses": [{"name": "worker", "state": {
                "terminated": terminated}}]},
        })  # fmt: skip

    def condition(self) -> tuple[str, str, str]:
        status = self.server.objects[("InferenceCluster", "c")]["status"]
        slo = next(c for c in status["conditions"] if c["type"] == reasons.SLO_PREDICTED)
        return slo["status"], slo["reason"], slo["message"]

    def events(self, reason: str) -> list[str]:
        return [e["message"] for e in self.server.events if e["reason"] == reason]

    def decode_replicas(self) -> int:
        replicas: int = self.server.objects[("WorkerPool", "c-decode")]["spec"]["replicas"]
        return replicas


@pytest.fixture
async def world() -> AsyncIterator[World]:
    world = World()
    running = asyncio.create_task(world.plans.run())
    yield world
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running


COMPLETE = {"type": "Complete", "status": "True", "lastTransitionTime": "2026-01-01T11:59:50Z"}
FAILED = {
    "type": "Failed",
    "status": "True",
    "reason": "BackoffLimitExceeded",
    "message": "Job has reached the specified backoff limit",
}


async def test_the_cluster_is_profiled_then_planned_from_the_measured_table(world: World) -> None:
    await world.reconcile()
    # Profiling: the Job runs, nothing is planned yet, the hand-written shape is deployed.
    assert ("Job", "c-profile") in world.server.objects
    assert world.planner.asked == []
    status, reason, message = world.condition()
    assert (status, reason) == ("Unknown", reasons.PROFILING)
    assert "Job c-profile" in message and "hand-written shape is deployed" in message
    assert world.decode_replicas() == 1

    world.finish_job(COMPLETE, 0, TABLE)
    await world.reconcile()
    table = world.server.objects[("ConfigMap", "c-perf-table")]
    owner = table["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("InferenceCluster", "c")
    assert table["data"][names.PERF_TABLE_KEY] == TABLE
    assert world.planner.tables == [TABLE]  # the planner gets the measured table
    assert world.condition()[1] == reasons.PLANNING
    assert len(world.events(reasons.EVENT_PROFILED)) == 1

    world.planner.release.set()
    await asyncio.wait_for(world.enqueued.event.wait(), 10)
    await world.reconcile()
    plan = world.server.objects[("InferenceCluster", "c")]["status"]["plan"]
    # The table is part of what the plan was made from: a new table plans again.
    assert plan["specHash"] == compute_spec_hash(world.spec, TABLE) != compute_spec_hash(world.spec)
    assert world.condition()[:2] == ("True", reasons.SLO_MET)
    assert world.decode_replicas() == 2  # the fake plan's shape

    # Settled: the Job gone (its TTL), nothing is profiled or planned again.
    world.server.objects.pop(("Job", "c-profile"))
    world.caches.of("Job").remove("ns", "c-profile")
    await world.reconcile()
    assert ("Job", "c-profile") not in world.server.objects
    assert len(world.planner.asked) == 1 and len(world.events(reasons.EVENT_PROFILED)) == 1


async def test_a_failed_profile_is_reported_once_and_not_run_again(world: World) -> None:
    await world.reconcile()
    world.finish_job(FAILED, 1, "Traceback (most recent call last):\nMemoryError\n")
    await world.reconcile()
    why = (
        "Job c-profile failed (BackoffLimitExceeded: Job has reached the specified backoff "
        "limit); its last log line: MemoryError"
    )
    table = world.server.objects[("ConfigMap", "c-perf-table")]
    assert table["metadata"]["annotations"][names.ANNOTATION_PROFILE_FAILURE] == why
    assert world.condition() == (
        "Unknown",
        reasons.PROFILING_FAILED,
        f"{why}; the hand-written shape is deployed",
    )
    assert world.events(reasons.PROFILING_FAILED) == [why]

    world.server.objects.pop(("Job", "c-profile"))
    world.caches.of("Job").remove("ns", "c-profile")
    await world.reconcile()
    await world.reconcile()
    assert ("Job", "c-profile") not in world.server.objects  # not started again
    assert world.events(reasons.PROFILING_FAILED) == [why]
    assert world.planner.asked == [] and world.decode_replicas() == 1


async def test_a_changed_engine_is_profiled_again(world: World) -> None:
    await world.reconcile()
    world.finish_job(COMPLETE, 0, TABLE)
    await world.reconcile()
    first = world.job()["metadata"]["annotations"][names.ANNOTATION_PROFILE_DIGEST]

    world.set_spec(engine_options=world.spec.decode.engine_options.model_validate(
        {"max_batch_tokens": 128}))  # fmt: skip
    await world.reconcile()
    # The old Job cannot be changed: it is deleted, and its deletion brings the next pass.
    assert world.server.deleted == [("Job", "c-profile")]
    assert world.condition()[1] == reasons.PROFILING
    world.caches.of("Job").remove("ns", "c-profile")
    await world.reconcile()
    second = world.job()["metadata"]["annotations"][names.ANNOTATION_PROFILE_DIGEST]
    assert second != first
    assert world.planner.tables == [TABLE]  # the old table plans nothing for the new engine


async def test_planning_turned_off_prunes_the_job_and_the_table(world: World) -> None:
    await world.reconcile()
    world.finish_job(COMPLETE, 0, TABLE)
    await world.reconcile()
    world.set_spec(planning=PlanningSpec(mode=PlanningMode.OFF))
    await world.reconcile()
    assert sorted(world.server.deleted) == [("ConfigMap", "c-perf-table"), ("Job", "c-profile")]
