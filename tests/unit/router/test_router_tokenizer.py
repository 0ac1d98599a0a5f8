"""A worker whose tokenizer is not the frontend's gets no work: its ids would mean other
text. It is shown unhealthy with the reason and counted once per incarnation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from tandem.engines.base import SamplingParams
from tandem.router.membership import Member, StaticMembership
from tandem.router.messages import GenerationRequest, RouterConfig
from tandem.router.metrics import RouterMetrics
from tandem.router.policy import WorkerRole
from tandem.router.service import Router
from tandem_dev.doubles.inprocess import InProcessCluster, InProcessWorker

D = WorkerRole.DECODE
OURS, OTHER = "v262-eos260-stops260-aaaa", "v49152-eos2-stops0.2-bbbb"


async def eventually(check: Callable[[], bool], within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110 - polling state owned by the router
            await asyncio.sleep(0.01)


async def test_workers_with_another_tokenizer_are_refused_and_counted_once() -> None:
    good = InProcessWorker("d1", D, tokenizer_fingerprint=OURS)
    other = InProcessWorker("d2", D, tokenizer_fingerprint=OTHER)
    silent = InProcessWorker("d3", D)  # reports none: refused too
    registry = CollectorRegistry()
    router = Router(
        StaticMembership([Member(w.address, D) for w in (good, other, silent)]),
        InProcessCluster([good, other, silent]),
        RouterMetrics(registry),
        RouterConfig(
            health_interval_seconds=0.01, health_timeout_seconds=1.0, tokenizer_fingerprint=OURS
        ),
    )

    def mismatches() -> float:
        return registry.get_sample_value("tandem_router_tokenizer_mismatches_total") or 0.0

    async with router.running():
        views = {v.address: v for v in router.workers()}
        assert views["d1"].healthy and router.ready()
        for refused in ("d2", "d3"):
            assert not views[refused].healthy
            assert "tokenizer mismatch" in views[refused].last_error
        assert OTHER in views["d2"].last_error and "(none reported)" in views["d3"].last_error
        for n in range(6):
            request = GenerationRequest(f"r{n}", list(range(8)), SamplingParams(max_tokens=2))
            chunks = [chunk async for chunk in router.generate(request)]
            assert chunks[0].route is not None and chunks[0].route.decode_worker == "d1"
        assert mismatches() == 2  # after many health rounds: once per worker incarnation
        # Restarted with the cluster's tokenizer: it serves again.
        other.incarnation, other.tokenizer_fingerprint = "inc-new", OURS
        await eventually(lambda: all(v.healthy for v in router.workers() if v.address != "d3"))
    assert mismatches() == 2
