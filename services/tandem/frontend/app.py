"""HTTP routes: map requests to ``OpenAIServing`` and its results to JSON or SSE.

Every response carries ``x-request-id``; every error leaves through ``error_response``
(one mapping from ``TandemError`` to OpenAI's body); unexpected exceptions are logged
with their traceback and answered with a generic 500.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol, TypeVar

from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tandem.admin import create_admin_app
from tandem.errors import TandemError
from tandem.frontend.api_keys import KeyStore
from tandem.frontend.errors import (
    InternalError,
    InvalidApiKeyError,
    MethodNotAllowedError,
    MissingApiKeyError,
    RequestTooLargeError,
    RouteNotFoundError,
)
from tandem.frontend.metrics import FrontendMetrics
from tandem.frontend.preparation import ANONYMOUS_TENANT, RequestContext
from tandem.frontend.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    ErrorInfo,
    ErrorResponse,
)
from tandem.frontend.serving import OpenAIServing
from tandem.frontend.validation import parse_request
from tandem.router.cold_start import NoWorkerStartedError
from tandem.router.errors import OverloadedError
from tandem.router.messages import WorkerView
from tandem.telemetry.tracing import TRACER

logger = logging.getLogger(__name__)

REQUEST_ID_HEADER = "x-request-id"
_CLIENT_REQUEST_ID = re.compile(r"[A-Za-z0-9._\-]{1,64}")
# nginx's "client closed request": never seen by the client, only in metrics.
CLIENT_CLOSED = 499
DEFAULT_DRAIN_GRACE_SECONDS = 600.0
MAX_DRAIN_GRACE_SECONDS = 3600.0
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}

Handler = Callable[[Request, RequestContext], Awaitable[Response]]
T = TypeVar("T")


class ClusterHealth(Protocol):
    def ready(self) -> bool: ...

    def workers(self) -> list[WorkerView]: ...

    async def drain(self, grace_seconds: float) -> int: ...


class _ClientGone(Exception):
    pass


def create_app(
    *,
    serving: OpenAIServing,
    health: ClusterHealth,
    metrics: FrontendMetrics,
    registry: CollectorRegistry,
    max_body_bytes: int,
    id_factory: Callable[[], str],
    lifespan: Callable[[Starlette], AbstractAsyncContextManager[None]] | None = None,
    clock: Callable[[], float] = time.monotonic,
    keys: KeyStore | None = None,
    serve_metrics: bool = True,
) -> Starlette:
    """``keys``: the API keys every /v1 route requires (None: keyless, every request is
    the anonymous tenant's). ``serve_metrics``: False where /metrics has its own port
    (``create_metrics_app``), so that no caller of the API can read it."""

    def request_id_for(request: Request) -> str:
        offered = request.headers.get(REQUEST_ID_HEADER, "")
        return offered if _CLIENT_REQUEST_ID.fullmatch(offered) else id_factory()

    def tenant_of(request: Request) -> str:
        if keys is None:
            return ANONYMOUS_TENANT
        scheme, _, key = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise MissingApiKeyError(
                "no API key: send one as 'Authorization: Bearer KEY' "
                "(an administrator makes one with 'tandem keys add')"
            )
        tenant = keys.tenant_for(key.strip())
        if tenant is None:
            raise InvalidApiKeyError("the API key is not valid: unknown or revoked")
        return tenant

    def endpoint(name: str, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            ctx = RequestContext(request_id=request_id_for(request), arrival=clock())
            # The request's root span (a client's own trace context is not adopted: it
            # would let any caller force sampling). It ends with the last byte.
            span = TRACER.start_span(
                f"frontend.{name}",
                kind=SpanKind.SERVER,
                attributes={"tandem.request_id": ctx.request_id, "url.path": request.url.path},
            )
            try:
                # Before the body is read: a caller without a key costs nothing more.
                ctx = dataclasses.replace(ctx, tenant=tenant_of(request))
                span.set_attribute("tandem.tenant", ctx.tenant)
                # Errors become responses below; their status code says how it went.
                with trace.use_span(span, record_exception=False, set_status_on_exception=False):
                    response = await handler(request, ctx)
            except TandemError as exc:
                response = error_response(exc, metrics)
            except _ClientGone:
                logger.info("request %s: client disconnected", ctx.request_id)
                response = Response(status_code=CLIENT_CLOSED)
            except Exception:  # the one place that turns bugs into a generic 500
                logger.exception("request %s failed", ctx.request_id)
                response = error_response(
                    InternalError(f"internal error (request id {ctx.request_id})"), metrics
                )
            response.headers[REQUEST_ID_HEADER] = ctx.request_id
            metrics.requests.labels(name, str(response.status_code)).inc()
            span.set_attribute("http.response.status_code", response.status_code)
            if response.status_code >= 500:  # a client's mistake is no server error
                span.set_status(StatusCode.ERROR)
            if isinstance(response, StreamingResponse):
                response.body_iterator = _observe(
                    response.body_iterator, lambda: _observe_duration(name, ctx, span)
                )
            else:
                _observe_duration(name, ctx, span)
            return response

        return run

    def _observe_duration(name: str, ctx: RequestContext, span: trace.Span) -> None:
        metrics.request_seconds.labels(name).observe(clock() - ctx.arrival)
        span.end()

    async def read_body(request: Request) -> bytes:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_body_bytes:
            raise _too_large(max_body_bytes)
        size, parts = 0, []
        async for part in request.stream():
            size += len(part)
            if size > max_body_bytes:
                raise _too_large(max_body_bytes)
            parts.append(part)
        return b"".join(parts)

    async def chat_completions(request: Request, ctx: RequestContext) -> Response:
        body = parse_request(ChatCompletionRequest, await read_body(request))
        result = await _until_disconnect(request, serving.create_chat_completion(body, ctx))
        return _to_response(result)

    async def completions(request: Request, ctx: RequestContext) -> Response:
        body = parse_request(CompletionRequest, await read_body(request))
        result = await _until_disconnect(request, serving.create_completion(body, ctx))
        return _to_response(result)

    async def models(request: Request, ctx: RequestContext) -> Response:
        return JSONResponse(serving.list_models().model_dump())

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        ready = health.ready()
        body = {"ready": ready, "workers": [dataclasses.asdict(w) for w in health.workers()]}
        return JSONResponse(body, status_code=200 if ready else 503)

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        error: TandemError
        if status == 404:
            error = RouteNotFoundError(f"no route for {request.method} {request.url.path}")
        elif status == 405:
            error = MethodNotAllowedError(f"{request.method} is not allowed on {request.url.path}")
        elif status < 500:
            detail = exc.detail if isinstance(exc, HTTPException) else "bad request"
            error = TandemError(str(detail), type="invalid_request_error", http_status=status)
        else:
            error = InternalError("internal error")
        response = error_response(error, metrics)
        response.headers[REQUEST_ID_HEADER] = request_id_for(request)
        return response

    routes = [
        Route("/v1/chat/completions", endpoint("chat", chat_completions), methods=["POST"]),
        Route("/v1/completions", endpoint("completions", completions), methods=["POST"]),
        Route("/v1/models", endpoint("models", models), methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
    ]
    if serve_metrics:
        routes.append(_metrics_route(registry))
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error, Exception: http_error},
    )
    # A trailing slash gets the OpenAI-shaped 404 naming the route, not a bare 307 redirect
    # without x-request-id (found by tandem_dev.faults.fuzz).
    app.router.redirect_slashes = False
    return app


def create_metrics_app(registry: CollectorRegistry) -> Starlette:
    """/metrics alone, for the scraper's own port."""
    return Starlette(routes=[_metrics_route(registry)])


def _metrics_route(registry: CollectorRegistry) -> Route:
    async def prometheus(request: Request) -> Response:
        # ?name[]=... exposes only those series, as prometheus_client's own handlers do:
        # the autoscaler polls one counter between its rounds.
        names = request.query_params.getlist("name[]")
        source = registry.restricted_registry(names) if names else registry
        return Response(generate_latest(source), media_type=CONTENT_TYPE_LATEST)

    return Route("/metrics", prometheus, methods=["GET"])


def create_frontend_admin_app(health: ClusterHealth) -> Starlette:
    """The admin socket's app: ``/drain`` stops admitting (readiness fails), then answers
    once in-flight requests are done or ``grace_seconds`` (default 600) passed: the
    preStop hook. Never on the public port, where any client could take the frontend
    out of service."""
    return create_admin_app(
        health.drain,
        default_grace_s=DEFAULT_DRAIN_GRACE_SECONDS,
        max_grace_s=MAX_DRAIN_GRACE_SECONDS,
    )


def error_response(exc: TandemError, metrics: FrontendMetrics | None = None) -> JSONResponse:
    """The single mapping from a ``TandemError`` to OpenAI's error body and status."""
    if metrics is not None:
        metrics.errors.labels(exc.code or exc.type).inc()
    body = ErrorResponse(
        error=ErrorInfo(message=exc.message, type=exc.type, param=exc.param, code=exc.code)
    )
    headers = {}
    if isinstance(exc, OverloadedError | NoWorkerStartedError):
        headers["retry-after"] = str(exc.retry_after_seconds)
    if exc.http_status == 401:
        headers["www-authenticate"] = "Bearer"
    return JSONResponse(body.model_dump(), status_code=exc.http_status, headers=headers)


def _too_large(limit: int) -> RequestTooLargeError:
    return RequestTooLargeError(f"the request body exceeds the {limit}-byte limit")


def _to_response(result: BaseModel | AsyncIterator[str]) -> Response:
    if isinstance(result, BaseModel):
        return JSONResponse(result.model_dump())
    return StreamingResponse(result, media_type="text/event-stream", headers=SSE_HEADERS)


async def _until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Run ``work``, cancelling it if the client disconnects first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait((task,))
    if task.cancelled() and watcher.done() and not watcher.cancelled():
        raise _ClientGone()
    return task.result()


async def _wait_for_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _observe(
    body: AsyncIterable[str | bytes | memoryview], done: Callable[[], None]
) -> AsyncIterator[str | bytes | memoryview]:
    try:
        async for item in body:
            yield item
    finally:
        done()
        aclose = getattr(body, "aclose", None)
        if aclose is not None:
            await aclose()
