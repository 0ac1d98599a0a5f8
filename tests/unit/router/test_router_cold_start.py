"""A request that finds no decode worker (the pool scaled to zero) waits for one to
start, counted as decode demand, and is served once it is ready; past
``cold_start_wait_seconds`` it gets a 503 with Retry-After naming the bound."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tandem.engines.base import SamplingParams
from tandem.frontend.app import error_response
from tandem.router.cold_start import NoWorkerStartedError, WorkerWait, decide_worker_wait
from tandem.router.errors import NoWorkerAvailableError
from tandem.router.membership import FileMembership, Member, write_members
from tandem.router.messages import GenerationRequest, RouterConfig
from tandem.router.metrics import RouterMetrics
from tandem.router.policy import WorkerRole
from tandem.router.service import Router
from tandem_dev.doubles.inprocess import InProcessCluster, InProcessWorker

D_ADDR = "127.0.0.1:7001"
WAITS = "tandem_router_cold_start_wait_seconds_count"
WAITING = "tandem_router_requests_waiting_for_worker"
QUEUED = "tandem_router_queue_depth_requests"


def test_decide_worker_wait() -> None:
    assert decide_worker_wait(found=True, waited_seconds=99, limit_seconds=10) is WorkerWait.SERVED
    assert decide_worker_wait(found=False, waited_seconds=9, limit_seconds=10) is WorkerWait.WAITING
    timed_out = decide_worker_wait(found=False, waited_seconds=10, limit_seconds=10)
    assert timed_out is WorkerWait.TIMED_OUT
    # A cluster that never waits (its decode pool keeps a worker) gives up at once.
    assert decide_worker_wait(found=False, waited_seconds=0, limit_seconds=0) is timed_out


def test_the_timeout_is_an_openai_503_with_retry_after_naming_the_bound() -> None:
    response = error_response(NoWorkerStartedError(120, retry_after_seconds=5))
    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    error = json.loads(bytes(response.body))["error"]
    assert error["code"] == "no_worker_started" and error["type"] == "server_error"
    assert "no decode worker started within 120 s" in error["message"]


class Setup:
    def __init__(self, tmp_path: Path, cold_start_s: float) -> None:
        self.members = tmp_path / "members.json"
        write_members(self.members, [])  # scaled to zero
        self.decode = InProcessWorker(D_ADDR, WorkerRole.DECODE)
        self.registry = CollectorRegistry()
        self.router = Router(
            FileMembership(self.members),
            InProcessCluster([self.decode]),
            RouterMetrics(self.registry),
            RouterConfig(health_interval_seconds=0.05, cold_start_wait_seconds=cold_start_s),
        )

    def value(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0

    async def stream(self, rid: str) -> int:
        request = GenerationRequest(rid, [1, 2, 3, 4], SamplingParams(max_tokens=3))
        return sum([len(chunk.token_ids) async for chunk in self.router.generate(request)])


async def test_a_request_waits_for_a_decode_worker_to_start_then_is_served(
    tmp_path: Path,
) -> None:
    setup = Setup(tmp_path, cold_start_s=30.0)
    async with setup.router.running():
        assert setup.router.ready()  # at zero the frontend keeps taking requests
        waiting = asyncio.create_task(setup.stream("first"))
        async with asyncio.timeout(5):
            while setup.value(WAITING) < 1:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # several health rounds without a worker
        assert not waiting.done()
        # The autoscaler reads the waiting request as decode demand.
        assert setup.value(QUEUED, pool="decode") == 1
        write_members(setup.members, [Member(D_ADDR, WorkerRole.DECODE)])  # it started
        async with asyncio.timeout(5):
            assert await waiting == 3
        assert setup.value(QUEUED, pool="decode") == 0
    assert setup.value(WAITING) == 0
    assert setup.value(WAITS, outcome="served") == 1
    assert setup.value(WAITS, outcome="timed_out") == 0


async def test_no_worker_within_the_bound_is_a_503_saying_so(tmp_path: Path) -> None:
    setup = Setup(tmp_path, cold_start_s=0.3)
    async with setup.router.running():
        with pytest.raises(NoWorkerStartedError) as caught:
            async with asyncio.timeout(5):
                await setup.stream("lonely")
    assert "within 0.3 s" in caught.value.message
    assert caught.value.http_status == 503
    assert setup.value(WAITS, outcome="timed_out") == 1
    assert setup.value(WAITING) == 0
    assert setup.value("tandem_router_rejected_requests_total", reason="no_worker_started") == 1


async def test_a_client_that_leaves_while_waiting_is_counted_as_cancelled(tmp_path: Path) -> None:
    setup = Setup(tmp_path, cold_start_s=30.0)
    async with setup.router.running():
        waiting = asyncio.create_task(setup.stream("impatient"))
        async with asyncio.timeout(5):
            while setup.value(WAITING) < 1:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    assert setup.value(WAITING) == 0
    assert setup.value(QUEUED, pool="decode") == 0
    assert setup.value(WAITS, outcome="cancelled") == 1


async def test_without_scale_to_zero_an_empty_pool_is_not_ready_and_refuses(
    tmp_path: Path,
) -> None:
    setup = Setup(tmp_path, cold_start_s=0.0)
    async with setup.router.running():
        assert not setup.router.ready()
        with pytest.raises(NoWorkerAvailableError) as caught:
            async with asyncio.timeout(30):
                await setup.stream("refused")
    assert not isinstance(caught.value, NoWorkerStartedError)
    assert setup.value(WAITS, outcome="timed_out") == 0
