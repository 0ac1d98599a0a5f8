"""GPU telemetry for workers: NVML readings -> Prometheus metrics and a health verdict.

Needs ``nvidia-ml-py`` (the ``gpu`` extra) and an NVIDIA driver; without either the
monitor reports "no GPU" and stays healthy, so CPU workers use it unchanged.
"""

from tandem.telemetry.gpu import (
    APPLICATION_XIDS,
    GpuSample,
    GpuSnapshot,
    HealthVerdict,
    judge_health,
)
from tandem.telemetry.metrics import GpuCollector, GpuMonitor, register_gpu_metrics

__all__ = [
    "APPLICATION_XIDS",
    "GpuCollector",
    "GpuMonitor",
    "GpuSample",
    "GpuSnapshot",
    "HealthVerdict",
    "judge_health",
    "register_gpu_metrics",
]
