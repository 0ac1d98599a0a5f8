"""The worker's HTTP side port for Kubernetes and Prometheus.

``GET /healthz`` (the process serves), ``GET /readyz`` (200 only while SERVING: flips to
503 when draining), ``GET /metrics``, and ``GET|POST /drain?grace_seconds=N`` (the
preStop hook: answers once in-flight work is done or the grace ran out).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tandem.worker.service import WorkerService
from tandem.worker.types import HealthStatus

DEFAULT_DRAIN_GRACE_S = 600.0


def create_http_app(service: WorkerService) -> Starlette:
    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        health = service.health()
        ready = health.status is HealthStatus.SERVING
        body = {"ready": ready, "status": health.status.value, "role": health.role.value}
        return JSONResponse(body, status_code=200 if ready else 503)

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def drain(request: Request) -> Response:
        raw = request.query_params.get("grace_seconds", "")
        try:
            grace = float(raw) if raw else DEFAULT_DRAIN_GRACE_S
        except ValueError:
            return JSONResponse({"error": "grace_seconds must be a number"}, status_code=400)
        return JSONResponse({"in_flight": await service.drain(min(grace, DEFAULT_DRAIN_GRACE_S))})

    return Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/drain", drain, methods=["GET", "POST"]),
        ]
    )


class HttpSidePort(uvicorn.Server):
    """uvicorn, minus its signal handling: the worker drains on SIGTERM itself."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def create_http_server(service: WorkerService, host: str, port: int) -> HttpSidePort:
    config = uvicorn.Config(
        create_http_app(service),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="off",
    )
    return HttpSidePort(config)
