"""Wiring: a frontend document -> router + serving + app, and running it under uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import uvicorn
from prometheus_client import CollectorRegistry, ProcessCollector
from starlette.applications import Starlette

from tandem.admin import bind_unix, create_embedded_server
from tandem.frontend.app import create_app
from tandem.frontend.config import FrontendConfig, compute_router_config
from tandem.frontend.metrics import FrontendMetrics
from tandem.frontend.preparation import ServingConfig
from tandem.frontend.serving import OpenAIServing
from tandem.router.kv_index import KvIndex
from tandem.router.membership import MembershipSource
from tandem.router.metrics import RouterMetrics
from tandem.router.ports import WorkerClientFactory
from tandem.router.service import Router
from tandem.router.targets import membership_from_targets
from tandem.tokenization import Tokenizer
from tandem.tokenization.selection import choose_tokenizer, fingerprint, load_tokenizer

logger = logging.getLogger(__name__)


def frontend_tokenizer(config: FrontendConfig) -> Tokenizer:
    """The tokenizer the cluster's model spec selects (the workers select the same)."""
    return load_tokenizer(choose_tokenizer(config.model, config.engine_kind))


def tokenizer_threads() -> int:
    """Threads for tokenizer work: one per core this process may run on (at most 8)."""
    return max(1, min(8, len(os.sched_getaffinity(0))))


def build_frontend(
    config: FrontendConfig,
    client_factory: WorkerClientFactory,
    *,
    tokenizer: Tokenizer | None = None,
    membership: MembershipSource | None = None,
    registry: CollectorRegistry | None = None,
    id_factory: Callable[[], str] = lambda: uuid.uuid4().hex,
    clock: Callable[[], float] = time.monotonic,
    index: KvIndex | None = None,
) -> tuple[Starlette, Router]:
    """The ASGI app for ``config``; the router polls workers while the app's lifespan runs.

    ``tokenizer`` defaults to the one the model spec selects; the router routes only to
    workers that report the same one (``fingerprint``). ``index``: where the router
    learns what workers cache (default: their KV events, ``KvIndex``)."""
    if registry is None:
        registry = CollectorRegistry()
        ProcessCollector(registry=registry)  # process_resident_memory_bytes & co.
    tokenizer = tokenizer or frontend_tokenizer(config)
    router = Router(
        membership or membership_from_targets(config.workers),
        client_factory,
        RouterMetrics(registry),
        dataclasses.replace(
            compute_router_config(config), tokenizer_fingerprint=fingerprint(tokenizer)
        ),
        clock=clock,
        index=index,
    )
    executor = ThreadPoolExecutor(tokenizer_threads(), thread_name_prefix="tokenizer")
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
        tokenizer,
        router,
        frontend_metrics,
        clock=clock,
        executor=executor,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            async with router.running():
                yield
        finally:
            executor.shutdown(wait=False, cancel_futures=True)

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


async def serve(
    app: Starlette, host: str, port: int, *, admin: tuple[Starlette, Path] | None = None
) -> None:
    """Serve until cancelled or signalled; prints ``READY <port>`` once listening.
    ``admin``: an app served on a Unix socket next to it (``tandem.admin``)."""
    admin_server = None
    if admin is not None:
        admin_app, admin_socket = admin
        admin_server = create_embedded_server(admin_app)
        admin_sockets = [bind_unix(admin_socket)]
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
        if admin_server is not None:
            tasks.create_task(admin_server.serve(sockets=admin_sockets))
            serving.add_done_callback(lambda _: setattr(admin_server, "should_exit", True))
        while not server.started:
            if serving.done():
                return
            await asyncio.sleep(0.05)
        sockets = [s for srv in server.servers for s in srv.sockets]
        bound = sockets[0].getsockname()[1] if sockets else port
        print(f"READY {bound}", flush=True)
