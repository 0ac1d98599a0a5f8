"""A long prompt that finds no ready prefill worker but one starting waits for it, while
its decode worker streams, instead of stalling those streams with a local prefill; it
waits at most ``max_prefill_start_wait_seconds``, then prefills locally as before."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client import CollectorRegistry

from tandem.engines.base import SamplingParams
from tandem.router.membership import FileMembership, Member, write_members
from tandem.router.messages import GenerationRequest, RouterConfig
from tandem.router.metrics import RouterMetrics
from tandem.router.policy import PolicyConfig, WorkerRole
from tandem.router.service import Router
from tandem_dev.doubles.inprocess import InProcessCluster, InProcessWorker

WAITS = "tandem_router_prefill_start_wait_seconds_count"
DIVERTED = "tandem_router_diverted_prefill_tokens"
LONG, SHORT = 600, 50
D_ADDR, P_ADDR = "127.0.0.1:7001", "127.0.0.1:7002"


def request(n: int, rid: str, max_tokens: int = 2) -> GenerationRequest:
    prompt = [i % 256 for i in range(n)]
    return GenerationRequest(rid, prompt, SamplingParams(max_tokens=max_tokens))


def publish(path: Path, *, prefill_starting: bool) -> None:
    write_members(
        path,
        [
            Member(D_ADDR, WorkerRole.DECODE),
            Member(P_ADDR, WorkerRole.PREFILL, starting=prefill_starting),
        ],
    )


class Setup:
    def __init__(self, tmp_path: Path, limit_s: float) -> None:
        self.members = tmp_path / "members.json"
        publish(self.members, prefill_starting=True)
        self.decode = InProcessWorker(D_ADDR, WorkerRole.DECODE, token_delay=0.01)
        self.prefill = InProcessWorker(P_ADDR, WorkerRole.PREFILL, ledger=self.decode.ledger)
        self.registry = CollectorRegistry()
        policy = PolicyConfig(min_prefill_tokens=100, max_prefill_start_wait_seconds=limit_s)
        self.router = Router(
            FileMembership(self.members),
            InProcessCluster([self.decode, self.prefill]),
            RouterMetrics(self.registry),
            RouterConfig(policy=policy, health_interval_seconds=0.05),
        )

    def waits(self, path: str) -> float:
        return self.registry.get_sample_value(WAITS, {"path": path}) or 0.0

    async def stream(self, req: GenerationRequest) -> int:
        return sum([len(chunk.token_ids) async for chunk in self.router.generate(req)])

    async def start_streaming(self) -> asyncio.Task[int]:
        """A short prompt decoding 500 tokens: the decode worker streams."""
        task = asyncio.create_task(self.stream(request(SHORT, "streaming", max_tokens=500)))
        async with asyncio.timeout(5):
            while self.decode.active == 0:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        return task


async def test_a_long_prompt_waits_for_the_starting_prefill_worker(tmp_path: Path) -> None:
    setup = Setup(tmp_path, limit_s=30.0)
    async with setup.router.running():
        streaming = await setup.start_streaming()
        local_before = setup.decode.local_prefills
        waiting = asyncio.create_task(setup.stream(request(LONG, "long")))
        await asyncio.sleep(0.5)  # ten health rounds: still starting
        assert not waiting.done()
        assert setup.prefill.prefill_calls == 0
        assert setup.registry.get_sample_value(DIVERTED) == LONG  # demand for the pool
        publish(setup.members, prefill_starting=False)
        async with asyncio.timeout(5):
            assert await waiting == 2
        streaming.cancel()
    assert setup.prefill.prefill_calls == 1
    assert setup.decode.local_prefills == local_before  # nothing stalled the stream
    assert (setup.waits("remote"), setup.waits("local")) == (1.0, 0.0)
    assert setup.registry.get_sample_value(DIVERTED) == 0.0


async def test_past_the_limit_it_prefills_on_its_decode_worker(tmp_path: Path) -> None:
    setup = Setup(tmp_path, limit_s=0.3)
    async with setup.router.running():
        streaming = await setup.start_streaming()
        local_before = setup.decode.local_prefills
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with asyncio.timeout(5):
            assert await setup.stream(request(LONG, "long")) == 2
        waited = loop.time() - started
        streaming.cancel()
    assert waited >= 0.3
    assert setup.prefill.prefill_calls == 0
    assert setup.decode.local_prefills == local_before + 1
    assert (setup.waits("remote"), setup.waits("local")) == (0.0, 1.0)


async def test_an_idle_decode_worker_prefills_at_once(tmp_path: Path) -> None:
    setup = Setup(tmp_path, limit_s=30.0)
    async with setup.router.running():
        async with asyncio.timeout(5):
            assert await setup.stream(request(LONG, "long")) == 2
    assert setup.prefill.prefill_calls == 0
    assert setup.decode.local_prefills == 1
    assert (setup.waits("remote"), setup.waits("local")) == (0.0, 0.0)
