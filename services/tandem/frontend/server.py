"""Wiring: a frontend document -> router + serving + app, and running it under uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import uvicorn
from prometheus_client import CollectorRegistry, Gauge, ProcessCollector
from starlette.applications import Starlette

from tandem.admin import bind_tcp, bind_unix, create_embedded_server
from tandem.frontend.api_keys import KeyStore
from tandem.frontend.app import create_app, create_metrics_app
from tandem.frontend.config import ApiKeySettings, FrontendConfig, compute_router_config
from tandem.frontend.metrics import FrontendMetrics, TenantMetrics
from tandem.frontend.preparation import ServingConfig
from tandem.frontend.serving import OpenAIServing
from tandem.frontend.tenancy import TenantGate
from tandem.router.kv_index import KvIndex
from tandem.router.membership import MembershipSource
from tandem.router.metrics import RouterMetrics
from tandem.router.ports import WorkerClientFactory
from tandem.router.service import Router
from tandem.router.targets import membership_from_targets
from tandem.security import CredentialStore
from tandem.security.credentials import register_expiry_metric
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
    credentials: CredentialStore | None = None,
) -> tuple[Starlette, Router]:
    """The ASGI app for ``config``; the router polls workers while the app's lifespan runs.

    ``tokenizer`` defaults to the one the model spec selects; the router routes only to
    workers that report the same one (``fingerprint``). ``index``: where the router
    learns what workers cache (default: their KV events, ``KvIndex``). With a
    ``metricsPort``, /metrics is served by ``app.state.metrics_app`` alone.
    ``credentials``: the store whose certificate expiry /metrics reports."""
    if registry is None:
        registry = CollectorRegistry()
        ProcessCollector(registry=registry)  # process_resident_memory_bytes & co.
    if credentials is not None:
        register_expiry_metric(registry, credentials)
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
    gate = TenantGate(
        router,
        config.frontend.tenancy,
        TenantMetrics(registry),
        dispatch_depth=config.router.dispatch_depth,
    )
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
        gate=gate,
    )

    keys = _key_store(config.api_keys, registry)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            async with router.running(), _reloading(keys, config.api_keys):
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
        keys=keys,
        serve_metrics=config.metrics_port is None,
    )
    app.state.metrics_app = create_metrics_app(registry) if config.metrics_port else None
    return app, router


def _key_store(settings: ApiKeySettings | None, registry: CollectorRegistry) -> KeyStore | None:
    """The API keys to require, read once now (None: keyless on purpose)."""
    if settings is None or not settings.required:
        return None
    keys = KeyStore([Path(d) for d in settings.directories])
    keys.reload()
    Gauge(
        "tandem_frontend_api_keys",
        "API keys this frontend accepts (records read from its key Secrets).",
        registry=registry,
    ).set_function(lambda: keys.key_count)
    Gauge(
        "tandem_frontend_api_key_records_invalid",
        "Items of the key Secrets that are not valid key records (named in the log).",
        registry=registry,
    ).set_function(lambda: keys.invalid_count)
    return keys


@contextlib.asynccontextmanager
async def _reloading(keys: KeyStore | None, settings: ApiKeySettings | None) -> AsyncIterator[None]:
    """Re-read the key records every ``reloadSeconds`` while the app runs."""
    if keys is None or settings is None:
        yield
        return

    async def reload_forever() -> None:
        while True:
            await asyncio.sleep(settings.reload_seconds)
            try:
                await asyncio.to_thread(keys.reload)
            except Exception:  # keep the keys we have; say why once per failure
                logger.exception("API keys: reload failed; keeping the previous keys")

    task = asyncio.create_task(reload_forever())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def serve(
    app: Starlette,
    host: str,
    port: int,
    *,
    admin: tuple[Starlette, Path] | None = None,
    metrics: tuple[Starlette, int] | None = None,
) -> None:
    """Serve until cancelled or signalled; prints ``READY <port>`` once listening.
    ``admin``: an app served on a Unix socket next to it (``tandem.admin``);
    ``metrics``: an app and the port it is served on, on the same host."""
    companions: list[tuple[uvicorn.Server, socket.socket]] = []
    if admin is not None:
        admin_app, admin_socket = admin
        companions.append((create_embedded_server(admin_app), bind_unix(admin_socket)))
    if metrics is not None:
        metrics_app, metrics_port = metrics
        companions.append((create_embedded_server(metrics_app), bind_tcp(host, metrics_port)))
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
        for companion, sock in companions:
            tasks.create_task(companion.serve(sockets=[sock]))
            serving.add_done_callback(_stop_with(companion))
        while not server.started:
            if serving.done():
                return
            await asyncio.sleep(0.05)
        sockets = [s for srv in server.servers for s in srv.sockets]
        bound = sockets[0].getsockname()[1] if sockets else port
        print(f"READY {bound}", flush=True)


def _stop_with(companion: uvicorn.Server) -> Callable[[object], None]:
    """A done-callback that stops ``companion`` when the main server stops."""

    def stop(_: object) -> None:
        companion.should_exit = True

    return stop
