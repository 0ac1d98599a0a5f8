"""The worker's HTTP side port for Kubernetes and Prometheus, and its admin socket.

Side port (read-only, on the pod IP and on loopback for ``kubectl port-forward``):
``GET /healthz`` (the process serves), ``GET /readyz`` (200 only while SERVING: flips to
503 when draining or when a GPU of the node failed, the GPU verdict in ``gpu``),
``GET /metrics``. Admin socket (``tandem.admin``, a Unix socket only the pod itself
reaches): ``GET|POST /drain?grace_seconds=N``, the preStop hook's target: answers once
in-flight work is done or the grace ran out.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tandem.admin import create_admin_app
from tandem.worker.service import WorkerService
from tandem.worker.types import HealthStatus

DEFAULT_DRAIN_GRACE_S = 600.0


def create_http_app(service: WorkerService) -> Starlette:
    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        health = service.health()
        ready = health.status is HealthStatus.SERVING
        body = {"ready": ready, "status": health.status.value, "role": health.role.value,
                "gpu": service.gpu_health().summary}  # fmt: skip
        return JSONResponse(body, status_code=200 if ready else 503)

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ]
    )


def create_worker_admin_app(service: WorkerService) -> Starlette:
    return create_admin_app(
        service.drain, default_grace_s=DEFAULT_DRAIN_GRACE_S, max_grace_s=DEFAULT_DRAIN_GRACE_S
    )
