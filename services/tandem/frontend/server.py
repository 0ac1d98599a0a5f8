"""Wiring: a frontend document -> router + serving + app, and running it under uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable

import uvicorn
from prometheus_client import CollectorRegistry, ProcessCollector
from starlette.applications import Starlette

from tandem.frontend.app import create_app
from tandem.frontend.config import FrontendConfig, compute_router_config
from tandem.frontend.metrics import FrontendMetrics
from tandem.frontend.preparation import ServingConfig
from tandem.frontend.serving import OpenAIServing
from tandem.router.membership import MembershipSource, membership_from_targets
from tandem.router.metrics import RouterMetrics
from tandem.router.ports import WorkerClientFactory
from tandem.router.service import Router
from tandem.tokenization import ByteTokenizer, Tokenizer

logger = logging.getLogger(__name__)


def make_tokenizer(kind: str) -> Tokenizer:
    if kind == "byte":
        return ByteTokenizer()
    raise ValueError(f"unknown tokenizer {kind!r}")


def build_frontend(
    config: FrontendConfig,
    client_factory: WorkerClientFactory,
    *,
    membership: MembershipSource | None = None,
    registry: CollectorRegistry | None = None,
    id_factory: Callable[[], str] = lambda: uuid.uuid4().hex,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[Starlette, Router]:
    """The ASGI app for ``config``; the router polls workers while the app's lifespan runs."""
    if registry is None:
        registry = CollectorRegistry()
        ProcessCollector(registry=registry)  # process_resident_memory_bytes & co.
    router = Router(
        membership or membership_from_targets(config.workers),
        client_factory,
        RouterMetrics(registry),
        compute_router_config(config),
        clock=clock,
    )
    frontend_metrics = FrontendMetrics(registry)
    serving = OpenAIServing(
        ServingConfig(
            served_model=config.served_model,
            max_input_tokens=config.model.max_input_tokens,
            max_output_tokens=config.model.max_output_tokens,
            max_context_tokens=config.context_tokens,
            accepted_models=frozenset({config.model.name}),
            created=int(time.time()),
        ),
        make_tokenizer("byte"),
        router,
        frontend_metrics,
        clock=clock,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with router.running():
            yield

    app = create_app(
        serving=serving,
        health=router,
        metrics=frontend_metrics,
        registry=registry,
        max_body_bytes=config.body_limit,
        id_factory=id_factory,
        lifespan=lifespan,
        clock=clock,
    )
    return app, router


async def serve(app: Starlette, host: str, port: int) -> None:
    """Serve until cancelled or signalled; prints ``READY <port>`` once listening."""
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=10,
        )
    )
    async with asyncio.TaskGroup() as tasks:
        serving = tasks.create_task(server.serve())
        while not server.started:
            if serving.done():
                return
            await asyncio.sleep(0.05)
        sockets = [s for srv in server.servers for s in srv.sockets]
        bound = sockets[0].getsockname()[1] if sockets else port
        print(f"READY {bound}", flush=True)
