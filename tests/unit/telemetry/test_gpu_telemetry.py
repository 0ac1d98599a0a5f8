"""GPU telemetry: NVML readings -> metrics and health, with and without GPUs."""

from __future__ import annotations

import importlib.util
import time
from types import ModuleType
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tandem.telemetry import GpuMonitor, GpuSample, GpuSnapshot, judge_health, register_gpu_metrics
from tandem.telemetry.nvml import NvmlSession


def scrape(monitor: GpuMonitor) -> CollectorRegistry:
    registry = CollectorRegistry()
    register_gpu_metrics(registry, monitor)
    return registry


def value(registry: CollectorRegistry, metric: str, **labels: str) -> float | None:
    return registry.get_sample_value(metric, labels)


def two_gpus(fake_nvml: ModuleType, **second: Any) -> Any:
    return fake_nvml.FakeNvml(gpus=[fake_nvml.FakeGpu(), fake_nvml.FakeGpu(**second)])


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is None, reason="nvidia-ml-py missing")
def test_real_pynvml_without_a_driver_reports_no_gpu_and_stays_healthy() -> None:
    monitor = GpuMonitor.open()  # this machine has no NVIDIA driver
    snapshot = monitor.snapshot()
    assert not snapshot.available and "driver" in (snapshot.unavailable_reason or "")
    verdict = monitor.health()
    assert verdict.healthy and verdict.summary.startswith("healthy: no GPU")
    registry = scrape(monitor)
    assert value(registry, "tandem_gpu_available") == 0.0
    assert value(registry, "tandem_gpu_healthy") == 1.0
    monitor.close()


def test_missing_library_reports_no_gpu() -> None:
    session = NvmlSession.open(None)
    assert session.snapshot().unavailable_reason == "nvidia-ml-py is not installed"
    assert judge_health(session.snapshot()).healthy


def test_missing_driver_through_nvml_error_codes(fake_nvml: ModuleType) -> None:
    nvml = fake_nvml.FakeNvml(driver_missing=True)
    monitor = GpuMonitor.open(nvml)
    assert "libnvidia-ml.so not found" in (monitor.snapshot().unavailable_reason or "")
    assert monitor.health().healthy
    monitor.close()


def test_readings_become_metrics(fake_nvml: ModuleType) -> None:
    nvml = two_gpus(fake_nvml, used=30 * 10**9, utilization=90, temperature=70)
    monitor = GpuMonitor.open(nvml, watch_xids=False)
    snapshot = monitor.snapshot()
    assert snapshot.available and snapshot.driver_version == "580.95.05"
    second = snapshot.gpus[1]
    assert (second.memory_used_bytes, second.utilization_ratio) == (30 * 10**9, 0.9)
    registry = scrape(monitor)
    assert value(registry, "tandem_gpu_available") == 1.0
    assert value(registry, "tandem_gpu_memory_used_bytes", gpu="1") == 30e9
    assert value(registry, "tandem_gpu_memory_total_bytes", gpu="0") == 80e9
    assert value(registry, "tandem_gpu_utilization_ratio", gpu="1") == 0.9
    assert value(registry, "tandem_gpu_temperature_celsius", gpu="1") == 70.0
    assert value(registry, "tandem_gpu_ecc_uncorrected_errors_total", gpu="0") == 0.0
    info = value(
        registry, "tandem_gpu_info", gpu="1", uuid="GPU-00000001-fake", name="NVIDIA H100 80GB HBM3"
    )
    assert info == 1.0
    assert value(registry, "tandem_gpu_healthy") == 1.0
    monitor.close()
    assert not nvml.initialised


def test_uncorrected_ecc_errors_make_the_worker_unhealthy(fake_nvml: ModuleType) -> None:
    monitor = GpuMonitor.open(two_gpus(fake_nvml, ecc_uncorrected=2), watch_xids=False)
    verdict = monitor.health()
    assert not verdict.healthy
    assert "GPU 1 (GPU-00000001-fake) has 2 uncorrected ECC error(s)" in verdict.summary
    assert value(scrape(monitor), "tandem_gpu_healthy") == 0.0


def test_unsupported_ecc_is_not_an_error(fake_nvml: ModuleType) -> None:
    monitor = GpuMonitor.open(two_gpus(fake_nvml, ecc_uncorrected=None), watch_xids=False)
    assert monitor.snapshot().gpus[1].ecc_uncorrected_errors is None
    assert monitor.health().healthy
    assert value(scrape(monitor), "tandem_gpu_ecc_uncorrected_errors_total", gpu="1") is None


def test_a_lost_gpu_is_unhealthy(fake_nvml: ModuleType) -> None:
    monitor = GpuMonitor.open(two_gpus(fake_nvml, lost=True), watch_xids=False)
    assert monitor.snapshot().gpus[1].lost
    verdict = monitor.health()
    assert not verdict.healthy and "is lost" in verdict.summary


def test_throttling_is_a_warning_only(fake_nvml: ModuleType) -> None:
    monitor = GpuMonitor.open(two_gpus(fake_nvml, temperature=90), watch_xids=False)
    verdict = monitor.health()
    assert verdict.healthy and "at 90 C, at or above its slowdown 87 C" in verdict.summary


def test_critical_xids_fail_health_application_xids_do_not(fake_nvml: ModuleType) -> None:
    nvml = two_gpus(fake_nvml)
    monitor = GpuMonitor.open(nvml)
    assert nvml.registered == [0, 1]
    nvml.emit_xid(0, 13)  # a CUDA program faulted: application error
    deadline = time.monotonic() + 10
    while monitor.xid_counts() != {0: {13: 1}} and time.monotonic() < deadline:
        time.sleep(0.01)
    assert monitor.health().healthy
    nvml.emit_xid(1, 79)  # fell off the bus
    while 1 not in monitor.xid_counts() and time.monotonic() < deadline:
        time.sleep(0.01)
    verdict = monitor.health()
    assert not verdict.healthy and "GPU 1 reported critical XID(s) 79" in verdict.summary
    registry = scrape(monitor)
    assert value(registry, "tandem_gpu_xid_errors_total", gpu="1", xid="79") == 1.0
    assert value(registry, "tandem_gpu_xid_errors_total", gpu="0", xid="13") == 1.0
    started = time.monotonic()
    monitor.close()
    assert not nvml.initialised
    assert time.monotonic() - started < 5  # the watcher's wait has a timeout


def test_judge_health_is_pure() -> None:
    sample = GpuSample(0, "GPU-x", "B200", ecc_uncorrected_errors=0)
    snapshot = GpuSnapshot((sample,), "580")
    assert judge_health(snapshot, {0: {48: 0}}).healthy
    assert not judge_health(snapshot, {0: {48: 1}}).healthy
    assert judge_health(GpuSnapshot(unavailable_reason="x")).reasons == ("no GPU: x",)


def test_thermal_and_power_throttling_are_reported_not_failed(fake_nvml: ModuleType) -> None:
    nvml = two_gpus(
        fake_nvml,
        clocks_event_reasons=fake_nvml.nvmlClocksEventReasonHwThermalSlowdown
        | fake_nvml.nvmlClocksEventReasonSwPowerCap,
    )
    monitor = GpuMonitor.open(nvml, watch_xids=False)
    assert monitor.snapshot().gpus[0].throttled == ()  # idle is not throttling
    assert monitor.snapshot().gpus[1].throttled == ("thermal", "power")
    verdict = monitor.health()
    assert verdict.healthy
    assert "GPU 1 (GPU-00000001-fake) is thermal-throttled" in verdict.summary
    assert "is power-throttled" in verdict.summary
    registry = scrape(monitor)
    assert value(registry, "tandem_gpu_throttled", gpu="1", reason="thermal") == 1.0
    assert value(registry, "tandem_gpu_throttled", gpu="1", reason="power") == 1.0
    assert value(registry, "tandem_gpu_throttled", gpu="0", reason="thermal") == 0.0


def test_unsupported_clock_reasons_are_not_throttling(fake_nvml: ModuleType) -> None:
    monitor = GpuMonitor.open(two_gpus(fake_nvml, clocks_event_reasons=None), watch_xids=False)
    assert monitor.snapshot().gpus[1].throttled == ()
    assert monitor.health().healthy


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is None, reason="nvidia-ml-py missing")
def test_the_fake_uses_the_real_modules_constants(fake_nvml: ModuleType) -> None:
    import pynvml

    names = [n for n in vars(fake_nvml) if n.startswith(("NVML_", "nvml")) and n.isidentifier()]
    constants = [n for n in names if isinstance(getattr(fake_nvml, n), int)]
    assert len(constants) >= 12
    for name in constants:
        assert getattr(pynvml, name) == getattr(fake_nvml, name), name
    for method in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetTotalEccErrors"):
        assert callable(getattr(pynvml, method))
