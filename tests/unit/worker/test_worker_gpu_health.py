"""A failed GPU takes a worker out of readiness and routing; a worker without GPUs is
unaffected. NVML is tests/unit/telemetry/fake_nvml.py (nvidia-ml-py 13.615.71's API)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import httpx

from tandem.telemetry import GpuMonitor, register_gpu_metrics
from tandem.worker.http_server import create_http_app
from tandem.worker.types import HealthStatus, Role

from .conftest import WorkerFactory


def load_fake_nvml() -> ModuleType:
    path = Path(__file__).parents[1] / "telemetry" / "fake_nvml.py"
    spec = importlib.util.spec_from_file_location("tandem_tests_fake_nvml", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def readyz(app: object) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://worker") as client:
        return await client.get("/readyz")


async def test_a_gpu_with_uncorrected_ecc_errors_makes_the_worker_unready(
    worker: WorkerFactory,
) -> None:
    fake = load_fake_nvml()
    nvml = fake.FakeNvml(gpus=[fake.FakeGpu()])
    async with worker(Role.DECODE, "decode-gpu") as running:
        monitor = GpuMonitor.open(nvml, watch_xids=False)
        register_gpu_metrics(running.service.metrics.registry, monitor)
        running.service.gpu_health = monitor.health
        app = create_http_app(running.service)
        assert (await readyz(app)).status_code == 200
        assert (await running.client.health()).status is HealthStatus.SERVING

        nvml.gpus[0].ecc_uncorrected = 3  # the driver counted uncorrected errors
        reply = await readyz(app)
        assert reply.status_code == 503
        assert "3 uncorrected ECC error(s)" in reply.json()["gpu"]
        # The router polls the same verdict over gRPC and stops routing here.
        assert (await running.client.health()).status is HealthStatus.NOT_SERVING
        monitor.close()


async def test_a_worker_without_gpus_reports_no_gpu_and_serves(worker: WorkerFactory) -> None:
    async with worker(Role.DECODE, "decode-cpu") as running:
        monitor = GpuMonitor.open()  # this machine: no NVIDIA driver
        running.service.gpu_health = monitor.health
        reply = await readyz(create_http_app(running.service))
        assert reply.status_code == 200
        assert reply.json()["gpu"].startswith("healthy: no GPU")
        monitor.close()
