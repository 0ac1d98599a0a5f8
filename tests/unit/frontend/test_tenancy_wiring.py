"""The tenant gate wired in: real serving, app and router over in-process workers."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import httpx
from prometheus_client import CollectorRegistry

from tandem.frontend.app import create_app
from tandem.frontend.config import (
    DisaggregationSettings,
    FrontendSettings,
    TenancySettings,
    TenantLimits,
    compute_router_config,
)
from tandem.frontend.metrics import FrontendMetrics, TenantMetrics
from tandem.frontend.preparation import RequestContext, ServingConfig
from tandem.frontend.protocol import CompletionRequest
from tandem.frontend.serving import OpenAIServing
from tandem.frontend.tenancy import TenantGate
from tandem.router.membership import Member, StaticMembership
from tandem.router.metrics import RouterMetrics
from tandem.router.policy import WorkerRole
from tandem.router.service import Router
from tandem.tokenization import ByteTokenizer
from tandem.tokenization.selection import fingerprint
from tandem_dev.doubles.inprocess import InProcessCluster, InProcessWorker, KvLedger
from tandem_dev.doubles.span_recorder import recording

from .harness import MODEL, make_config


@dataclass
class Gated:
    serving: OpenAIServing
    gate: TenantGate
    router: Router
    client: httpx.AsyncClient
    registry: CollectorRegistry
    worker: InProcessWorker

    def metric(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0


@contextlib.asynccontextmanager
async def gated(
    tenancy: TenancySettings, *, depth: int = 1, prefill_delay: float = 0.0
) -> AsyncIterator[Gated]:
    tokenizer = ByteTokenizer()
    worker = InProcessWorker(
        "w1",
        WorkerRole.BOTH,
        KvLedger(),
        prefill_delay=prefill_delay,
        tokenizer_fingerprint=fingerprint(tokenizer),
    )
    config = make_config(
        frontend=FrontendSettings(
            disaggregation=DisaggregationSettings(min_prefill_tokens=100),
            max_queued_requests=8,
            tenancy=tenancy,
        )
    )
    registry = CollectorRegistry()
    router = Router(
        StaticMembership([Member("w1", WorkerRole.BOTH)]),
        InProcessCluster([worker]),
        RouterMetrics(registry),
        dataclasses.replace(
            compute_router_config(config), tokenizer_fingerprint=fingerprint(tokenizer)
        ),
    )
    gate = TenantGate(router, tenancy, TenantMetrics(registry), dispatch_depth=depth)
    metrics = FrontendMetrics(registry)
    serving = OpenAIServing(
        ServingConfig(
            served_model=MODEL,
            max_input_tokens=config.model.max_input_tokens,
            max_output_tokens=config.model.max_output_tokens,
            max_context_tokens=config.context_tokens,
        ),
        tokenizer,
        router,
        metrics,
        gate=gate,
    )
    ids = itertools.count(1)
    app = create_app(
        serving=serving,
        health=router,
        metrics=metrics,
        registry=registry,
        max_body_bytes=1 << 20,
        id_factory=lambda: f"req{next(ids)}",
    )
    transport = httpx.ASGITransport(app=app)
    async with (
        router.running(),
        httpx.AsyncClient(transport=transport, base_url="http://frontend") as client,
    ):
        yield Gated(serving, gate, router, client, registry, worker)


async def eventually(check: Callable[[], bool], within: float = 5.0) -> None:
    """Poll ``check`` until it holds; fails the test after ``within`` seconds."""
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110 - polling state owned by fakes
            await asyncio.sleep(0.002)


def completion(prompt: str = "hello", max_tokens: int = 3) -> CompletionRequest:
    return CompletionRequest(model=MODEL, prompt=prompt, max_tokens=max_tokens)


async def test_a_light_tenant_overtakes_a_heavy_tenants_burst() -> None:
    tenancy = TenancySettings(tenants={"heavy": TenantLimits(), "light": TenantLimits()})
    async with gated(tenancy, depth=1, prefill_delay=0.1) as fe:
        done: list[str] = []

        async def call(tenant: str, rid: str) -> None:
            ctx = RequestContext(request_id=rid, arrival=0.0, tenant=tenant)
            await fe.serving.create_completion(completion(), ctx)
            done.append(rid)

        burst = [asyncio.create_task(call("heavy", f"h{i}")) for i in range(6)]
        await eventually(lambda: fe.gate.held + fe.gate.dispatched == 6)  # tokenized
        assert fe.gate.held == 5
        # Held requests are demand the autoscaler sees (short prompts: the decode pool).
        queued = fe.metric("tandem_router_queue_depth_requests", pool="decode")
        assert queued >= 5
        light = asyncio.create_task(call("light", "l0"))
        await asyncio.gather(*burst, light)
    assert done.index("l0") <= 1, done
    assert (
        fe.metric("tandem_frontend_tenant_requests_total", tenant="heavy", outcome="admitted") == 6
    )
    assert fe.metric("tandem_frontend_tenant_queue_wait_seconds_count", tenant="light") == 1
    assert fe.metric("tandem_frontend_tenant_tokens_total", tenant="light", kind="generated") == 3


async def test_one_tenant_over_http_is_served_without_holding() -> None:
    async with gated(TenancySettings(), depth=2) as fe:
        body = {"model": MODEL, "prompt": "hi", "max_tokens": 4}
        responses = await asyncio.gather(
            *(fe.client.post("/v1/completions", json=body) for _ in range(2))
        )
        assert [r.status_code for r in responses] == [200, 200]
        assert fe.gate.held == 0 and fe.gate.dispatched == 0
        assert fe.metric("tandem_frontend_tenant_queue_wait_seconds_sum", tenant="anonymous") == 0.0
        assert (
            fe.metric("tandem_frontend_tenant_tokens_total", tenant="anonymous", kind="generated")
            == 8
        )


async def test_tenant_limit_over_http_is_openai_shaped_with_retry_after() -> None:
    tenancy = TenancySettings(defaults=TenantLimits(max_in_flight_requests=1))
    with recording() as finished:
        async with gated(tenancy, prefill_delay=0.2) as fe:
            body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
            first = asyncio.create_task(fe.client.post("/v1/completions", json=body))
            await eventually(lambda: fe.gate.dispatched == 1)
            refused = await fe.client.post("/v1/completions", json=body)
            assert (await first).status_code == 200
    # Refused before its prompt was tokenized: one tokenize span, the first request's.
    assert [s.name for s in finished].count("frontend.tokenize") == 1
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    error = refused.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and error["type"] == "requests"
    assert "'anonymous'" in error["message"] and "at most 1 requests" in error["message"]


async def test_router_counts_requests_waiting_in_front_of_it() -> None:
    async with gated(TenancySettings()) as fe:
        fe.router.count_queued(lambda: {"prefill": (2, 900), "decode": (1, 10)})
        assert fe.metric("tandem_router_queue_depth_requests", pool="prefill") == 2
        assert fe.metric("tandem_router_queue_depth_tokens", pool="prefill") == 900
        assert fe.metric("tandem_router_queue_depth_requests", pool="decode") == 1


async def test_time_held_is_the_queue_phase_and_a_span_under_the_request() -> None:
    with recording() as finished:
        async with gated(TenancySettings(), depth=1, prefill_delay=0.1) as fe:
            body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
            responses = await asyncio.gather(
                *(fe.client.post("/v1/completions", json=body) for _ in range(2))
            )
            assert [r.status_code for r in responses] == [200, 200]
            held = fe.metric("tandem_frontend_tenant_queue_wait_seconds_sum", tenant="anonymous")
            queue = fe.metric("tandem_frontend_ttft_phase_seconds_sum", phase="queue", path="local")
            queued = fe.metric(
                "tandem_frontend_ttft_phase_seconds_count", phase="queue", path="local"
            )
    assert held > 0 and queue == held and queued == 2
    (span,) = [s for s in finished if s.name == "frontend.queue"]
    roots = {s.context.span_id for s in finished if s.name == "frontend.completions"}
    assert span.parent is not None and span.parent.span_id in roots
