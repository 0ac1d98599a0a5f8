"""GPU metrics for a worker's ``/metrics`` and its health: the GpuMonitor.

Series (read from NVML at scrape time; ``gpu`` is the NVML index, a bounded label):

* ``tandem_gpu_available`` — 1 when NVML sees GPUs, 0 otherwise
* ``tandem_gpu_info{gpu,uuid,name}`` — 1 per GPU
* ``tandem_gpu_memory_used_bytes{gpu}``, ``tandem_gpu_memory_total_bytes{gpu}``
* ``tandem_gpu_utilization_ratio{gpu}`` — 0..1, busy time of the last sample period
* ``tandem_gpu_temperature_celsius{gpu}``
* ``tandem_gpu_ecc_uncorrected_errors_total{gpu}`` — since the driver loaded
* ``tandem_gpu_throttled{gpu,reason}`` — 1 while clocks are held down for ``thermal`` or
  ``power`` reasons, else 0
* ``tandem_gpu_xid_errors_total{gpu,xid}`` — critical XIDs since the worker started
* ``tandem_gpu_healthy`` — 1 healthy (or no GPU), 0 when a GPU failed
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from tandem.telemetry.gpu import GpuSnapshot, HealthVerdict, judge_health
from tandem.telemetry.nvml import NvmlModule, NvmlSession, import_pynvml
from tandem.telemetry.xid import XidWatcher


class GpuMonitor:
    """NVML session + XID watcher; ``open`` never fails (no GPU is a valid state)."""

    def __init__(self, session: NvmlSession, watcher: XidWatcher | None) -> None:
        self._session = session
        self._watcher = watcher

    @classmethod
    def open(cls, nvml: NvmlModule | None = None, *, watch_xids: bool = True) -> GpuMonitor:
        session = NvmlSession.open(nvml if nvml is not None else import_pynvml())
        watcher = XidWatcher(session) if watch_xids else None
        if watcher is not None and not watcher.start():
            watcher = None
        return cls(session, watcher)

    def snapshot(self) -> GpuSnapshot:
        return self._session.snapshot()

    def xid_counts(self) -> dict[int, dict[int, int]]:
        return self._watcher.counts() if self._watcher is not None else {}

    def health(self, snapshot: GpuSnapshot | None = None) -> HealthVerdict:
        return judge_health(snapshot or self.snapshot(), self.xid_counts())

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
        self._session.close()


class GpuCollector(Collector):
    def __init__(self, monitor: GpuMonitor) -> None:
        self._monitor = monitor

    def collect(self) -> Iterator[Metric]:
        snapshot = self._monitor.snapshot()
        verdict = self._monitor.health(snapshot)
        available = GaugeMetricFamily("tandem_gpu_available", "1 when NVML sees GPUs")
        available.add_metric([], 1.0 if snapshot.available else 0.0)
        healthy = GaugeMetricFamily("tandem_gpu_healthy", "0 when a GPU of this node failed")
        healthy.add_metric([], 1.0 if verdict.healthy else 0.0)
        yield available
        yield healthy
        yield from _per_gpu(snapshot)
        xids = CounterMetricFamily(
            "tandem_gpu_xid_errors", "Critical XID events since start", labels=["gpu", "xid"]
        )
        for gpu, counts in sorted(self._monitor.xid_counts().items()):
            for xid, count in sorted(counts.items()):
                xids.add_metric([str(gpu), str(xid)], float(count))
        yield xids


def _per_gpu(snapshot: GpuSnapshot) -> Iterator[Metric]:
    info = GaugeMetricFamily("tandem_gpu_info", "GPUs of this node", labels=["gpu", "uuid", "name"])
    used = GaugeMetricFamily("tandem_gpu_memory_used_bytes", "GPU memory in use", labels=["gpu"])
    total = GaugeMetricFamily("tandem_gpu_memory_total_bytes", "GPU memory", labels=["gpu"])
    busy = GaugeMetricFamily("tandem_gpu_utilization_ratio", "GPU busy time", labels=["gpu"])
    temp = GaugeMetricFamily("tandem_gpu_temperature_celsius", "GPU core", labels=["gpu"])
    ecc = CounterMetricFamily(
        "tandem_gpu_ecc_uncorrected_errors",
        "Uncorrected ECC errors since the driver loaded",
        labels=["gpu"],
    )
    throttled = GaugeMetricFamily(
        "tandem_gpu_throttled", "1 while clocks are held down, by cause", labels=["gpu", "reason"]
    )
    for gpu in snapshot.gpus:
        label = [str(gpu.index)]
        info.add_metric([str(gpu.index), gpu.uuid, gpu.name], 1.0)
        for cause in ("thermal", "power"):
            throttled.add_metric([str(gpu.index), cause], 1.0 if cause in gpu.throttled else 0.0)
        for family, value in (
            (used, gpu.memory_used_bytes),
            (total, gpu.memory_total_bytes),
            (busy, gpu.utilization_ratio),
            (temp, gpu.temperature_celsius),
            (ecc, gpu.ecc_uncorrected_errors),
        ):
            if value is not None:
                family.add_metric(label, float(value))
    yield from (info, used, total, busy, temp, ecc, throttled)


def register_gpu_metrics(registry: CollectorRegistry, monitor: GpuMonitor) -> GpuCollector:
    collector = GpuCollector(monitor)
    registry.register(collector)
    return collector
