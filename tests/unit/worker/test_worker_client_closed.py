"""A client closed under its own calls (a peer evicted after another call found it gone)
fails those calls UNAVAILABLE: grpcio ends them with asyncio.CancelledError, which a
decode handler took for its own cancellation and never answered, hanging the router's
request. A caller that really is cancelled still sees a cancellation."""

from __future__ import annotations

import asyncio

import pytest

from tandem.worker.client import WorkerClient
from tandem.worker.errors import WorkerCallError
from tandem.worker.types import Role

from .conftest import WorkerFactory
from .test_worker_keepalive import FreezableProxy


async def test_calls_on_a_closed_client_fail_unavailable(worker: WorkerFactory) -> None:
    async with worker(Role.BOTH, "w1") as both, FreezableProxy(both.address).running() as proxy:
        client = WorkerClient(proxy.address, timeout_s=20.0)
        assert (await client.health()).worker_id == "w1"
        proxy.freeze()
        in_flight = asyncio.ensure_future(client.health())
        await asyncio.sleep(0.2)
        await client.close()  # cut now, as an eviction without grace would
        with pytest.raises(WorkerCallError) as cut:
            await asyncio.wait_for(in_flight, 5)
        assert cut.value.grpc_status == "UNAVAILABLE"
        with pytest.raises(WorkerCallError) as refused:
            await client.kv_agent()
        assert refused.value.grpc_status == "UNAVAILABLE"


async def test_a_cancelled_caller_stays_cancelled(worker: WorkerFactory) -> None:
    async with (
        worker(Role.BOTH, "w1") as both,
        FreezableProxy(both.address).running() as proxy,
        WorkerClient(proxy.address, timeout_s=20.0) as client,
    ):
        assert (await client.health()).worker_id == "w1"
        proxy.freeze()
        caller = asyncio.ensure_future(client.health())
        await asyncio.sleep(0.2)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
