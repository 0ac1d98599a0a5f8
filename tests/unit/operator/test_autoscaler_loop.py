"""The autoscaler's shell, one round at a time: what it writes, in which order, and
what it leaves alone. The API server is a recorder here; tests/e2e runs the real one."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from tandem.api.v1alpha1 import InferenceCluster, InferenceClusterStatus, PoolRole
from tandem.autoscale import LoadSample, WorkerLoad
from tandem.autoscale.exposition import RouterReading
from tandem_operator import names, reasons
from tandem_operator.kube.informer import Caches, Key, Store
from tandem_operator.scaling.autoscaler import Autoscaler
from tandem_operator.scaling.decisions import AUTOSCALER_FIELD_MANAGER, VICTIM_DELETION_COST
from tandem_operator.scaling.metrics_source import FrontendScrape, ScrapeError
from tandem_operator.status.compute import StatusResult

Json = dict[str, Any]
WALL = datetime(2026, 1, 1, tzinfo=UTC)


class RecordingClient:
    """Stands in for KubeClient: records each write, answers like the API server."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Json]] = []
        self.version = 100
        self.scaled = asyncio.Event()

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Json | None = None,
        content_type: str = "application/json",
    ) -> Json:
        assert ("fieldManager", AUTOSCALER_FIELD_MANAGER) in (query or [])
        assert content_type == "application/merge-patch+json"
        self.calls.append((method, path, body or {}))
        if path.endswith("/scale"):
            self.scaled.set()
        self.version += 1
        return {"metadata": {"resourceVersion": str(self.version)}, **(body or {})}

    async def apply(
        self,
        obj: Json,
        *,
        field_manager: str = "",
        force: bool = True,
        subresource: str | None = None,
    ) -> Json:
        assert field_manager == AUTOSCALER_FIELD_MANAGER and subresource == "status"
        self.calls.append(("APPLY", f"{obj['kind']}/{obj['metadata']['name']}", obj))
        return obj

    async def create(self, resource: object, namespace: str, obj: Json) -> Json:
        self.calls.append(("CREATE", obj["kind"], obj))
        return obj


class StubSource:
    """Frontend load as the test sets it (the HTTP side is covered by the e2e tier)."""

    def __init__(self) -> None:
        self.scrape_result: FrontendScrape | ScrapeError = ScrapeError("not set")
        self.scraped: list[str] = []
        self.diverted: float | None = None  # tandem_router_diverted_prompts_total
        self.waiting: float | None = None  # tandem_router_requests_waiting_for_worker
        self.polls = 0
        self.waiting_polls = 0

    async def scrape(
        self, cr: InferenceCluster, frontend_pods: Any, *, at: float
    ) -> FrontendScrape:
        self.scraped.append(cr.metadata.name)
        if isinstance(self.scrape_result, ScrapeError):
            raise self.scrape_result
        reading = self.scrape_result.reading
        samples = {role: replace(sample, at=at) for role, sample in reading.samples.items()}
        return replace(self.scrape_result, reading=replace(reading, at=at, samples=samples))

    async def diverted_prompts(self, cr: InferenceCluster, frontend_pods: Any) -> float | None:
        self.polls += 1
        return self.diverted

    async def waiting_for_worker(self, cr: InferenceCluster, frontend_pods: Any) -> float | None:
        self.waiting_polls += 1
        return self.waiting

    async def close(self) -> None:
        pass


def cluster_obj(name: str = "c", **autoscaling: Any) -> Json:
    spec: Json = {
        "model": {"name": "m"},
        "prefill": {"replicas": 1, "minReplicas": 0, "maxReplicas": 4},
        "decode": {"replicas": 3, "minReplicas": 1, "maxReplicas": 4},
        "autoscaling": {
            "enabled": True,
            "mode": "builtin",
            "intervalSeconds": 1,
            "decode": {
                "scaleDownStabilizationSeconds": 0,
                "targetActiveSequencesPerReplica": 4,
                "maxStepDown": 1,
            },
            **autoscaling,
        },
    }
    return {
        "apiVersion": "tandem.dev/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": name, "namespace": "ns", "generation": 1, "uid": f"uid-{name}"},
        "spec": spec,
    }


def pool_obj(cluster: str, role: PoolRole, replicas: int, version: int = 50) -> Json:
    return {
        "apiVersion": "tandem.dev/v1alpha1",
        "kind": "WorkerPool",
        "metadata": {
            "name": names.pool_name(cluster, role),
            "namespace": "ns",
            "resourceVersion": str(version),
            "labels": {names.LABEL_CLUSTER: cluster},
        },
        "spec": {"clusterName": cluster, "role": role.value, "replicas": replicas},
    }


def pod_obj(cluster: str, name: str, role: str, ip: str) -> Json:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": {names.LABEL_CLUSTER: cluster, names.LABEL_ROLE: role},
        },
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]},
    }


class Harness:
    def __init__(self) -> None:
        self.stores = {kind: Store() for kind in ("InferenceCluster", "WorkerPool", "Pod")}
        self.client = RecordingClient()
        self.source = StubSource()
        self.enqueued: list[Key] = []
        self.clock = 1000.0
        self.autoscaler = Autoscaler(
            self.client,  # type: ignore[arg-type]
            Caches(dict(self.stores)),
            self.source,
            identity="op",
            enqueue=self.enqueued.append,
            clock=lambda: self.clock,
            now=lambda: WALL,
        )

    async def sleep(self, seconds: float) -> None:
        """Time passing without waiting (for tests that drive one wait themselves)."""
        self.clock += seconds

    def add(self, kind: str, obj: Json) -> None:
        self.stores[kind].upsert(obj)

    def cluster(self, name: str = "c") -> InferenceCluster:
        from tandem_operator.status.observe import parse_cluster

        obj = self.stores["InferenceCluster"].get("ns", name)
        assert obj is not None
        return parse_cluster(obj)

    async def round(self, name: str = "c") -> None:
        await self.autoscaler._round(("ns", name), self.cluster(name))
        self.clock += 1.0

    def writes(self) -> list[tuple[str, str]]:
        return [(method, path) for method, path, _ in self.client.calls]


def load(**pools: LoadSample) -> FrontendScrape:
    return FrontendScrape(
        reading=RouterReading(at=0.0, samples={PoolRole(k): v for k, v in pools.items()}),
        frontends=1,
    )


@pytest.fixture
def harness() -> Harness:
    h = Harness()
    h.add("InferenceCluster", cluster_obj())
    h.add("WorkerPool", pool_obj("c", PoolRole.PREFILL, 1))
    h.add("WorkerPool", pool_obj("c", PoolRole.DECODE, 3))
    for i in range(3):
        h.add("Pod", pod_obj("c", f"c-decode-{i}", "decode", f"10.0.0.{i}"))
    h.add("Pod", pod_obj("c", "c-prefill-0", "prefill", "10.0.1.0"))
    h.add("Pod", pod_obj("c", "c-frontend-0", "frontend", "10.0.2.0"))
    return h


async def test_a_queue_scales_the_prefill_pool_up_through_scale(harness: Harness) -> None:
    harness.source.scrape_result = load(
        prefill=LoadSample(at=0, queued_requests=3, queued_tokens=3 * 32768),
        decode=LoadSample(at=0, active_sequences=12),
    )
    await harness.round()
    scale = [c for c in harness.client.calls if c[1].endswith("/scale")]
    assert [(m, p) for m, p, _ in scale] == [
        ("PATCH", "/apis/tandem.dev/v1alpha1/namespaces/ns/workerpools/c-prefill/scale")
    ]
    assert scale[0][2] == {"spec": {"replicas": 3}}
    event = next(obj for m, _, obj in harness.client.calls if m == "CREATE")
    assert event["reason"] == "QueuedTokensAboveTarget"
    # As docs/autoscaling.md shows it: the pool, the step, then the policy's numbers.
    assert event["message"].startswith("prefill: 1 -> 3: ")
    assert "prefill: " not in event["message"].removeprefix("prefill: ")
    statuses = {p: obj["status"] for m, p, obj in harness.client.calls if m == "APPLY"}
    assert statuses["WorkerPool/c-prefill"]["lastScaleReason"] == "QueuedTokensAboveTarget"
    assert statuses["WorkerPool/c-prefill"]["lastScaleTime"] == "2026-01-01T00:00:00Z"
    assert statuses["WorkerPool/c-prefill"]["queueDepth"] == {"requests": 3, "tokens": 98304}
    assert statuses["InferenceCluster/c"]["pools"]["prefill"]["queueDepth"]["tokens"] == 98304
    assert ("ns", "c") in harness.enqueued  # the workload follows without waiting


async def test_a_scale_down_marks_its_victims_before_lowering_replicas(harness: Harness) -> None:
    busy = {
        "10.0.0.0:50051": WorkerLoad(key="10.0.0.0:50051", active_sequences=2),
        "10.0.0.1:50051": WorkerLoad(key="10.0.0.1:50051"),  # idle: the one to go
        "10.0.0.2:50051": WorkerLoad(key="10.0.0.2:50051", active_sequences=1),
    }
    harness.source.scrape_result = replace(
        load(decode=LoadSample(at=0, active_sequences=3)), worker_loads=busy
    )
    await harness.round()
    writes = [c for c in harness.client.calls if c[0] == "PATCH"]
    paths = [p.rsplit("/", 2)[-2:] for _, p, _ in writes]
    assert paths[-1] == ["c-decode", "scale"]  # replicas go down last
    costs = {
        p.rsplit("/", 1)[1]: int(b["metadata"]["annotations"][names.ANNOTATION_DELETION_COST])
        for _, p, b in writes
        if "/pods/" in p
    }
    assert costs["c-decode-1"] == VICTIM_DELETION_COST
    assert costs["c-decode-0"] > costs["c-decode-2"] > VICTIM_DELETION_COST
    assert writes[-1][2] == {"spec": {"replicas": 2}}  # one step down (maxStepDown 1)


async def test_an_unreadable_frontend_changes_nothing(harness: Harness) -> None:
    harness.source.scrape_result = ScrapeError("connection refused")
    await harness.round()
    assert harness.client.calls == []


def _amend(harness: Harness) -> StatusResult:
    empty = StatusResult(cluster=InferenceClusterStatus(conditions=[]), pools={}, events=())
    return harness.autoscaler.amend_status(harness.cluster(), empty)


def _settle(harness: Harness, result: StatusResult) -> None:
    """The reconciler wrote ``result``: the cache now holds it."""
    obj = harness.stores["InferenceCluster"].get("ns", "c")
    assert obj is not None
    harness.add("InferenceCluster", {**obj, "status": result.cluster.to_wire()})


async def test_no_metrics_source_is_said_once_and_put_in_status(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="tandem_operator.scaling.autoscaler")
    harness.source.scrape_result = ScrapeError("run it with --frontend-metrics-url ...",
                                               reason=reasons.NO_METRICS_SOURCE)  # fmt: skip
    for _ in range(5):
        await harness.round()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "[ns/c] autoscaler: run it with --frontend-metrics-url ..."
    ]
    assert harness.enqueued == [("ns", "c")]  # one status rewrite, not one per round
    amended = _amend(harness)
    (active,) = [c for c in amended.cluster.conditions if c.type == reasons.SCALING_ACTIVE]
    assert (active.status, active.reason, active.message) == (
        "False",
        reasons.NO_METRICS_SOURCE,
        "run it with --frontend-metrics-url ...",
    )
    assert [(e.type, e.reason) for e in amended.events] == [("Warning", reasons.NO_METRICS_SOURCE)]
    _settle(harness, amended)
    assert _amend(harness).events == ()  # already in status: no second Event

    caplog.clear()
    harness.source.scrape_result = load(decode=LoadSample(at=0, active_sequences=12))
    await harness.round()
    await harness.round()
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO] == [
        "[ns/c] autoscaler: reading the frontends"
    ]
    (active,) = [c for c in _amend(harness).cluster.conditions if c.type == reasons.SCALING_ACTIVE]
    assert (active.status, active.reason) == ("True", reasons.METRICS_AVAILABLE)


async def test_a_frontend_not_ready_yet_is_status_but_no_warning(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    harness.source.scrape_result = ScrapeError("no frontend pod is ready",
                                               reason=reasons.NO_READY_FRONTEND)  # fmt: skip
    await harness.round()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    amended = _amend(harness)
    assert amended.events == ()
    (active,) = [c for c in amended.cluster.conditions if c.type == reasons.SCALING_ACTIVE]
    assert (active.status, active.reason) == ("False", reasons.NO_READY_FRONTEND)


async def test_a_write_the_cache_has_not_seen_is_not_repeated(harness: Harness) -> None:
    harness.source.scrape_result = load(prefill=LoadSample(at=0, queued_tokens=3 * 32768))
    await harness.round()
    await harness.round()  # the WorkerPool cache still says 1 replica
    scales = [b for _, p, b in harness.client.calls if p.endswith("c-prefill/scale")]
    assert scales == [{"spec": {"replicas": 3}}]


async def test_a_held_scale_up_is_reported_as_scaling_limited(harness: Harness) -> None:
    harness.add("WorkerPool", pool_obj("c", PoolRole.DECODE, 4))
    harness.add("Pod", {
        "metadata": {"name": "c-decode-9", "namespace": "ns",
                     "labels": {names.LABEL_CLUSTER: "c", names.LABEL_ROLE: "decode"}},
        "status": {"conditions": [{"type": "PodScheduled", "status": "False",
                                   "reason": "Unschedulable",
                                   "message": "0/3 nodes are available: 3 Insufficient cpu."}]},
    })  # fmt: skip
    harness.source.scrape_result = load(decode=LoadSample(at=0, active_sequences=40))
    await harness.round()  # at max (4): capped
    cr = harness.cluster()
    empty = StatusResult(cluster=InferenceClusterStatus(conditions=[]), pools={}, events=())
    amended = harness.autoscaler.amend_status(cr, empty)
    found = {c.type: (c.status, c.reason) for c in amended.cluster.conditions}
    assert found == {
        reasons.SCALING_LIMITED: ("True", "AtMaxReplicas"),
        reasons.SCALING_ACTIVE: ("True", reasons.METRICS_AVAILABLE),
    }
    assert [(e.type, e.reason) for e in amended.events] == [("Warning", reasons.SCALING_LIMITED)]
    # Reported once: the same condition already in status emits nothing new.
    settled = cr.model_copy(update={"status": amended.cluster})
    again = harness.autoscaler.amend_status(settled, empty)
    assert again.events == ()


async def test_external_mode_starts_no_loop_and_writes_nothing() -> None:
    h = Harness()
    h.add("InferenceCluster", cluster_obj("ext", mode="external"))
    h.add("InferenceCluster", cluster_obj("own"))
    for name in ("ext", "own"):
        h.add("WorkerPool", pool_obj(name, PoolRole.PREFILL, 2))
        h.add("WorkerPool", pool_obj(name, PoolRole.DECODE, 2))
        for i in range(2):
            h.add("Pod", pod_obj(name, f"{name}-prefill-{i}", "prefill", f"10.0.{i}.1"))
            h.add("Pod", pod_obj(name, f"{name}-decode-{i}", "decode", f"10.0.{i}.2"))
    h.source.scrape_result = load(
        prefill=LoadSample(at=0, queued_tokens=10 * 32768),
        decode=LoadSample(at=0, active_sequences=8),
    )
    task = asyncio.create_task(h.autoscaler.run())
    try:
        async with asyncio.timeout(10):
            await h.client.scaled.wait()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert any(p.endswith("own-prefill/scale") for _, p in h.writes())
    assert "ext" not in h.source.scraped
    assert not any("/ext" in p or "ext-" in p for _, p in h.writes())
    ext = h.cluster("ext")
    untouched = StatusResult(cluster=InferenceClusterStatus(), pools={}, events=())
    assert h.autoscaler.amend_status(ext, untouched) is untouched


async def test_diverted_prompts_bring_the_next_round_forward(harness: Harness) -> None:
    harness.add("InferenceCluster", cluster_obj(intervalSeconds=10))
    harness.add("WorkerPool", pool_obj("c", PoolRole.PREFILL, 0))
    harness.source.scrape_result = load(
        prefill=LoadSample(at=0, diverted_prompts_total=4.0),
        decode=LoadSample(at=0, active_sequences=12),
    )
    await harness.round()  # at 1000; the clock moves on to 1001
    autoscaler, key, cluster = harness.autoscaler, ("ns", "c"), harness.cluster()
    autoscaler._sleep = harness.sleep
    # Nothing diverted since: the wait lasts the interval, reading the counter each second
    # (1002..1009; at 1010 the round is due anyway).
    harness.source.diverted = 4.0
    await autoscaler._until_next_round(key, cluster, due=1010.0)
    assert harness.clock == 1010.0 and harness.source.polls == 8
    # One more long prompt on a decode worker while the pool is at zero: decide now.
    harness.source.diverted = 5.0
    await autoscaler._until_next_round(key, cluster, due=1020.0)
    assert harness.clock == 1011.0
    # With a worker in the pool, not before half an interval since the round (at 1000).
    harness.add("WorkerPool", pool_obj("c", PoolRole.PREFILL, 1))
    harness.clock = 1001.0
    await autoscaler._until_next_round(key, cluster, due=1010.0)
    assert harness.clock == 1005.0
    # At the pool's maximum (4) there is nothing to decide early, nor anything to read.
    harness.add("WorkerPool", pool_obj("c", PoolRole.PREFILL, 4))
    harness.clock, harness.source.polls = 1001.0, 0
    await autoscaler._until_next_round(key, cluster, due=1010.0)
    assert harness.clock == 1010.0 and harness.source.polls == 0


async def test_a_request_waiting_at_zero_wakes_the_decode_pool_before_the_round(
    harness: Harness,
) -> None:
    obj = cluster_obj(intervalSeconds=10)
    obj["spec"]["decode"].update(replicas=0, minReplicas=0)
    harness.add("InferenceCluster", obj)
    harness.add("WorkerPool", pool_obj("c", PoolRole.PREFILL, 0))
    harness.add("WorkerPool", pool_obj("c", PoolRole.DECODE, 0))
    harness.source.scrape_result = load(prefill=LoadSample(at=0), decode=LoadSample(at=0))
    await harness.round()  # at 1000: idle, both pools stay at zero
    assert not any(path.endswith("/scale") for _, path in harness.writes())
    autoscaler, key, cluster = harness.autoscaler, ("ns", "c"), harness.cluster()
    autoscaler._sleep = harness.sleep
    # Nobody waits: the wait lasts the interval (read each second, 1002..1009).
    harness.source.waiting = 0.0
    await autoscaler._until_next_round(key, cluster, due=1010.0)
    assert harness.clock == 1010.0 and harness.source.waiting_polls == 8
    # A request waits for a worker: decide at the next second, not at the round.
    harness.source.waiting = 1.0
    await autoscaler._until_next_round(key, cluster, due=1020.0)
    assert harness.clock == 1011.0
    # With a decode worker there is nothing to wake, and nothing is read.
    harness.add("WorkerPool", pool_obj("c", PoolRole.DECODE, 1))
    harness.source.waiting_polls = 0
    await autoscaler._until_next_round(key, cluster, due=1020.0)
    assert harness.clock == 1020.0 and harness.source.waiting_polls == 0
