"""A reconcile under planning.mode auto never waits for its plan: it applies the
hand-written shape and says it is planning; once the (fake, slow) planner answers, the
cluster is enqueued and the next reconcile applies the planned shape and announces it.
The API server is an in-memory stand-in here; tests/e2e runs the real one."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from tandem.api.v1alpha1 import PlanningMode
from tandem_operator import names, reasons
from tandem_operator.controller import Reconciler
from tandem_operator.kube.client import BY_KIND, Resource
from tandem_operator.kube.informer import Caches, Store
from tandem_operator.planning.service import PlanService
from tandem_operator.render.pods import RenderSettings

from .test_planning import KEY, Enqueued, SlowPlanner, _spec

Json = dict[str, Any]
KINDS = (
    *BY_KIND,
    "InferenceCluster",
    "WorkerPool",
    "Pod",
    "Node",
    "Secret",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "NetworkPolicy",
)


class FakeApiServer:
    """Server-side apply as far as a reconcile sees it: objects get a uid and a
    generation; a status apply replaces the status only."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], Json] = {}
        self.events: list[Json] = []
        self.version = 0

    async def apply(
        self,
        obj: Json,
        *,
        field_manager: str = names.FIELD_MANAGER,
        force: bool = True,
        subresource: str | None = None,
    ) -> Json:
        self.version += 1
        key = (obj["kind"], obj["metadata"]["name"])
        live = self.objects.get(key, {})
        meta = {
            **live.get("metadata", {}),
            **obj["metadata"],
            "uid": live.get("metadata", {}).get("uid", f"uid-{key[1]}"),  # kept, as a server does
            "generation": live.get("metadata", {}).get("generation", 0) + 1,
            "resourceVersion": str(self.version),
        }
        if subresource == "status":
            stored = {**live, "metadata": meta, "status": obj["status"]}
        else:
            stored = {**obj, "metadata": meta, "status": live.get("status", {})}
        self.objects[key] = stored
        return stored

    async def create(self, resource: Resource, namespace: str | None, obj: Json) -> Json:
        self.events.append(obj)
        return obj

    async def delete(
        self, resource: Resource, namespace: str | None, name: str, *, uid: str | None = None
    ) -> bool:
        return True


async def test_the_reconcile_proceeds_with_the_hand_written_shape_until_the_plan_is_made() -> None:
    spec = _spec(PlanningMode.AUTO)
    cluster = {
        "apiVersion": "tandem.dev/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": "c", "namespace": "ns", "uid": "u", "generation": 1,
                     "resourceVersion": "0"},
        "spec": spec.to_wire(),
    }  # fmt: skip
    caches = Caches({kind: Store() for kind in KINDS})
    caches.of("InferenceCluster").upsert(cluster)
    server, planner, enqueued = FakeApiServer(), SlowPlanner(), Enqueued()
    server.objects[("InferenceCluster", "c")] = cluster
    plans = PlanService(planner, enqueued)
    reconciler = Reconciler(
        server,  # type: ignore[arg-type]
        caches,
        RenderSettings(),
        identity="test",
        now=lambda: datetime(2026, 1, 1, tzinfo=UTC),
        plans=plans,
    )
    running = asyncio.create_task(plans.run())
    try:
        # The planner is stuck until released: the reconcile returns all the same.
        await asyncio.wait_for(reconciler.reconcile(KEY), 10)
        assert len(planner.asked) == 1
        status = server.objects[("InferenceCluster", "c")]["status"]
        slo = next(c for c in status["conditions"] if c["type"] == reasons.SLO_PREDICTED)
        assert (slo["status"], slo["reason"]) == ("Unknown", reasons.PLANNING)
        pools = {r: server.objects[("WorkerPool", f"c-{r}")]["spec"] for r in ("prefill", "decode")}
        assert (pools["prefill"]["replicas"], pools["decode"]["replicas"]) == (1, 1)

        planner.release.set()
        await asyncio.wait_for(enqueued.event.wait(), 10)
        assert enqueued.keys == [KEY]
        await asyncio.wait_for(reconciler.reconcile(KEY), 10)
    finally:
        running.cancel()
    # The fake plan: two aggregated TP1 workers, no prefill pool.
    status = server.objects[("InferenceCluster", "c")]["status"]
    assert status["plan"]["shape"] == "2(TP1) agg"
    slo = next(c for c in status["conditions"] if c["type"] == reasons.SLO_PREDICTED)
    assert (slo["status"], slo["reason"]) == ("True", reasons.SLO_MET)
    pools = {r: server.objects[("WorkerPool", f"c-{r}")]["spec"] for r in ("prefill", "decode")}
    assert (pools["prefill"]["replicas"], pools["decode"]["replicas"]) == (0, 2)
    assert server.objects[("Deployment", "c-decode")]["spec"]["replicas"] == 2
    assert [e["reason"] for e in server.events if e["reason"] == reasons.EVENT_PLANNED] == [
        reasons.EVENT_PLANNED
    ]
    assert len(planner.asked) == 1
