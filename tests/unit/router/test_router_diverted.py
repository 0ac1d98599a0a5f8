"""``tandem_router_diverted_prefill_tokens``: long prompts prefilling on a decode worker
only because the prefill pool could not take them -- the demand that wakes a prefill
pool scaled to zero."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from tandem.engines.base import SamplingParams
from tandem.router.membership import Member, StaticMembership
from tandem.router.messages import GenerationRequest, RouterConfig
from tandem.router.metrics import RouterMetrics
from tandem.router.policy import PolicyConfig, WorkerRole
from tandem.router.service import Router
from tandem_dev.doubles.inprocess import InProcessCluster, InProcessWorker

DIVERTED = "tandem_router_diverted_prefill_tokens"
LONG, SHORT = 600, 50


def make_router(decode: InProcessWorker, registry: CollectorRegistry) -> Router:
    return Router(
        StaticMembership([Member(decode.address, WorkerRole.DECODE)]),  # no prefill pool
        InProcessCluster([decode]),
        RouterMetrics(registry),
        RouterConfig(policy=PolicyConfig(min_prefill_tokens=100), health_interval_seconds=3600),
    )


def request(n: int, rid: str) -> GenerationRequest:
    return GenerationRequest(rid, [i % 256 for i in range(n)], SamplingParams(max_tokens=2))


async def test_long_prompts_prefilled_locally_for_want_of_a_prefill_pool_are_counted() -> None:
    registry = CollectorRegistry()
    decode = InProcessWorker("d1", WorkerRole.DECODE, prefill_delay=0.3)
    seen: list[float] = []

    async def consume(req: GenerationRequest) -> None:
        async for _ in router.generate(req):
            seen.append(registry.get_sample_value(DIVERTED) or 0.0)

    router = make_router(decode, registry)
    async with router.running():
        long_task = asyncio.create_task(consume(request(LONG, "long")))
        short_task = asyncio.create_task(consume(request(SHORT, "short")))
        async with asyncio.timeout(5):
            while registry.get_sample_value(DIVERTED) != LONG:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        await asyncio.gather(long_task, short_task)
    # The short prompt would have prefilled locally anyway: only the long one counted,
    # and only until its first token.
    assert registry.get_sample_value(DIVERTED) == 0.0
    assert max(seen) <= LONG
