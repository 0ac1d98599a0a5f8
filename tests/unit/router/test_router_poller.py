"""The router's background health poller survives anything a worker or the membership
throws at it: it logs, counts, keeps polling, and readiness follows the workers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import grpc
import pytest
from prometheus_client import CollectorRegistry

from tandem.proto import worker_pb2 as pb
from tandem.proto import worker_pb2_grpc
from tandem.router.membership import Member
from tandem.router.messages import RouterConfig
from tandem.router.metrics import RouterMetrics
from tandem.router.policy import WorkerRole
from tandem.router.ports import HealthInfo
from tandem.router.service import Router
from tandem.worker.client import WorkerClient
from tandem.worker.errors import WorkerCallError
from tandem_dev.doubles.inprocess import InProcessCluster, InProcessWorker

D = WorkerRole.DECODE


async def eventually(check: Callable[[], bool], within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110 - polling state owned by the router
            await asyncio.sleep(0.01)


class GarbledWorker(InProcessWorker):
    """Answers Health with something the router cannot understand while ``garbled``."""

    def __init__(self, address: str, role: WorkerRole) -> None:
        super().__init__(address, role)
        self.garbled = True
        self.health_calls = 0

    async def health(self, *, timeout_s: float | None = None) -> HealthInfo:
        self.health_calls += 1
        if self.garbled:
            # What a client raises on a role string this version does not know.
            raise ValueError("'gpu' is not a valid Role")
        return await super().health(timeout_s=timeout_s)


class FlakyMembership:
    """Raises an unexpected error on the rounds listed in ``failing``."""

    def __init__(self, members: Sequence[Member]) -> None:
        self.members_now = list(members)
        self.calls = 0
        self.failing: set[int] = set()

    async def members(self) -> Sequence[Member]:
        self.calls += 1
        if self.calls in self.failing:
            raise RuntimeError("membership backend exploded")
        return list(self.members_now)

    def on_change(self, callback: Callable[[], None]) -> None:
        pass

    async def close(self) -> None:
        pass


def make_router(
    membership: FlakyMembership, workers: list[InProcessWorker]
) -> tuple[Router, CollectorRegistry]:
    registry = CollectorRegistry()
    router = Router(
        membership,
        InProcessCluster(workers),
        RouterMetrics(registry),
        RouterConfig(health_interval_seconds=0.01, health_timeout_seconds=1.0),
    )
    return router, registry


def errors(registry: CollectorRegistry, stage: str) -> float:
    value = registry.get_sample_value("tandem_router_health_poll_errors_total", {"stage": stage})
    return value or 0.0


async def test_a_worker_answering_garbage_is_unhealthy_and_polling_goes_on() -> None:
    garbled = GarbledWorker("d1", D)
    good = InProcessWorker("d2", D)
    membership = FlakyMembership([Member("d1", D), Member("d2", D)])
    router, registry = make_router(membership, [garbled, good])
    async with router.running():
        views = {v.address: v for v in router.workers()}
        assert not views["d1"].healthy and "gpu" in views["d1"].last_error
        assert views["d2"].healthy and router.ready()
        calls = garbled.health_calls
        await eventually(lambda: garbled.health_calls >= calls + 3)
        garbled.garbled = False
        await eventually(lambda: all(v.healthy for v in router.workers()))
    assert errors(registry, "worker") >= 3


async def test_a_worker_that_stops_serving_is_taken_out_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its health says so (draining here; not serving alike): no error, but the frontend's
    log says when the worker left its choices, as a failed call's "marked unhealthy" does."""
    worker = InProcessWorker("d1", D)
    router, _ = make_router(FlakyMembership([Member("d1", D)]), [worker])
    async with router.running():
        assert router.ready()
        worker.draining = True
        await eventually(lambda: not any(v.healthy for v in router.workers()))
        await asyncio.sleep(0.1)  # several more rounds at 0.01 s
    said = [r for r in caplog.records if "is not serving" in r.getMessage()]
    assert len(said) == 1 and said[0].getMessage().startswith("worker d1 (decode)")
    assert "(draining)" in said[0].getMessage()


async def test_a_membership_failure_keeps_the_last_members_and_polling_goes_on() -> None:
    membership = FlakyMembership([Member("d1", D)])
    membership.failing = {2, 3}
    d1, d2 = InProcessWorker("d1", D), InProcessWorker("d2", D)
    router, registry = make_router(membership, [d1, d2])
    async with router.running():
        await eventually(lambda: membership.calls >= 4)
        assert router.ready() and [v.address for v in router.workers()] == ["d1"]
        membership.members_now.append(Member("d2", D))
        await eventually(lambda: len([v for v in router.workers() if v.healthy]) == 2)
    assert errors(registry, "membership") == 2


async def test_a_failing_first_round_does_not_stop_the_router_from_starting() -> None:
    membership = FlakyMembership([Member("d1", D)])
    membership.failing = {1}
    router, registry = make_router(membership, [InProcessWorker("d1", D)])
    async with router.running():
        assert not router.ready()
        await eventually(router.ready)
    assert errors(registry, "membership") == 1


class RoleServicer(worker_pb2_grpc.WorkerServicer):
    """A worker of a future version: its Health names a role this router does not know."""

    async def Health(self, request: pb.HealthRequest, context: object) -> pb.HealthResponse:
        return pb.HealthResponse(
            status=pb.HealthResponse.SERVING, worker_id="w", incarnation="i", role="gpu"
        )


async def test_the_grpc_client_turns_an_unknown_role_into_a_call_error() -> None:
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    worker_pb2_grpc.add_WorkerServicer_to_server(RoleServicer(), server)  # type: ignore[no-untyped-call]
    await server.start()
    try:
        async with WorkerClient(f"127.0.0.1:{port}", timeout_s=5.0) as client:
            with pytest.raises(WorkerCallError) as failed:
                await client.health()
    finally:
        await server.stop(grace=None)
    assert "role" in failed.value.message and "'gpu'" in failed.value.message
