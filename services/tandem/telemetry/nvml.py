"""Reading GPUs through NVML (``pynvml`` from nvidia-ml-py): the I/O shell.

Functions used, as in nvidia-ml-py 13.615.71 (``pynvml.py``): ``nvmlInit()``,
``nvmlShutdown()``, ``nvmlSystemGetDriverVersion()``, ``nvmlDeviceGetCount()``,
``nvmlDeviceGetHandleByIndex(i)``, ``nvmlDeviceGetIndex(h)``, ``nvmlDeviceGetName(h)``,
``nvmlDeviceGetUUID(h)``, ``nvmlDeviceGetMemoryInfo(h)`` (``.total``/``.used``),
``nvmlDeviceGetUtilizationRates(h)`` (``.gpu`` percent),
``nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU)``,
``nvmlDeviceGetTemperatureThreshold(h, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)``,
``nvmlDeviceGetTotalEccErrors(h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)``,
``nvmlDeviceGetCurrentClocksEventReasons(h)`` (a bit mask: ``nvmlClocksEventReason*``),
``nvmlEventSetCreate()``, ``nvmlDeviceRegisterEvents(h, nvmlEventTypeXidCriticalError,
set)``, ``nvmlEventSetWait_v2(set, timeout_ms)`` (``.device``, ``.eventData`` = XID),
``nvmlEventSetFree(set)``. Errors are ``NVMLError`` subclasses whose ``.value`` is the
``NVML_ERROR_*`` code.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

from tandem.telemetry.gpu import GpuSample, GpuSnapshot

logger = logging.getLogger(__name__)

# NVML_ERROR_* codes (pynvml.py, nvidia-ml-py 13.615.71).
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15


class NvmlModule(Protocol):
    """The parts of ``pynvml`` we call (the module satisfies it structurally)."""

    NVMLError: type[Exception]
    NVML_TEMPERATURE_GPU: int
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: int
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED: int
    NVML_VOLATILE_ECC: int
    nvmlEventTypeXidCriticalError: int
    nvmlClocksEventReasonSwPowerCap: int
    nvmlClocksEventReasonHwSlowdown: int
    nvmlClocksEventReasonSwThermalSlowdown: int
    nvmlClocksEventReasonHwThermalSlowdown: int
    nvmlClocksEventReasonHwPowerBrakeSlowdown: int

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetIndex(self, handle: Any) -> int: ...
    def nvmlDeviceGetName(self, handle: Any) -> str: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...
    def nvmlDeviceGetTemperatureThreshold(self, handle: Any, threshold: int) -> int: ...
    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter: int) -> int: ...
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int: ...
    def nvmlEventSetCreate(self) -> Any: ...
    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any) -> None: ...
    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any: ...
    def nvmlEventSetFree(self, event_set: Any) -> None: ...


def error_code(nvml: NvmlModule, error: BaseException) -> int | None:
    value = getattr(error, "value", None) if isinstance(error, nvml.NVMLError) else None
    return value if isinstance(value, int) else None


def import_pynvml() -> NvmlModule | None:
    try:
        module: NvmlModule = importlib.import_module("pynvml")
    except ImportError:
        return None
    return module


class NvmlSession:
    """An initialised NVML with the node's device handles (``open`` never raises)."""

    def __init__(self, nvml: NvmlModule | None, handles: list[Any], reason: str | None) -> None:
        self.nvml = nvml
        self.handles = handles
        self.unavailable_reason = reason
        self.driver_version: str | None = None

    @classmethod
    def open(cls, nvml: NvmlModule | None) -> NvmlSession:
        if nvml is None:
            return cls(None, [], "nvidia-ml-py is not installed")
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as error:
            code = error_code(nvml, error)
            reason = {
                NVML_ERROR_LIBRARY_NOT_FOUND: "no NVIDIA driver (libnvidia-ml.so not found)",
                NVML_ERROR_DRIVER_NOT_LOADED: "the NVIDIA driver is not loaded",
            }.get(code or -1, f"NVML failed to initialise: {error}")
            return cls(None, [], reason)
        try:
            count = nvml.nvmlDeviceGetCount()
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            session = cls(nvml, handles, None if handles else "NVML found no GPU")
            session.driver_version = nvml.nvmlSystemGetDriverVersion()
        except nvml.NVMLError as error:
            nvml.nvmlShutdown()
            return cls(None, [], f"NVML could not list GPUs: {error}")
        return session

    def snapshot(self) -> GpuSnapshot:
        if self.nvml is None or not self.handles:
            return GpuSnapshot(unavailable_reason=self.unavailable_reason or "NVML found no GPU")
        samples = tuple(self._sample(i, h) for i, h in enumerate(self.handles))
        return GpuSnapshot(samples, self.driver_version)

    def close(self) -> None:
        nvml, self.nvml = self.nvml, None
        if nvml is not None:
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError as error:
                logger.debug("nvmlShutdown failed: %s", error)

    def _sample(self, index: int, handle: Any) -> GpuSample:
        nvml = self.nvml
        assert nvml is not None
        lost = False

        def read(call: Callable[[], Any]) -> Any:
            """One NVML query; None when unsupported; a lost GPU marks the sample."""
            nonlocal lost
            try:
                return call()
            except nvml.NVMLError as error:
                code = error_code(nvml, error)
                if code == NVML_ERROR_GPU_IS_LOST:
                    lost = True
                elif code != NVML_ERROR_NOT_SUPPORTED:
                    logger.debug("NVML query on GPU %s failed: %s", index, error)
                return None

        uuid = read(lambda: nvml.nvmlDeviceGetUUID(handle))
        name = read(lambda: nvml.nvmlDeviceGetName(handle))
        memory = read(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        utilization = read(lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        temperature = read(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
        slowdown = read(
            lambda: nvml.nvmlDeviceGetTemperatureThreshold(
                handle, nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
            )
        )
        ecc = read(
            lambda: nvml.nvmlDeviceGetTotalEccErrors(
                handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
            )
        )
        reasons = read(lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
        return GpuSample(
            index=index,
            uuid=str(uuid) if uuid is not None else "unknown",
            name=str(name) if name is not None else "unknown",
            memory_used_bytes=int(memory.used) if memory is not None else None,
            memory_total_bytes=int(memory.total) if memory is not None else None,
            utilization_ratio=utilization.gpu / 100 if utilization is not None else None,
            temperature_celsius=temperature,
            slowdown_temperature_celsius=slowdown,
            ecc_uncorrected_errors=ecc,
            throttled=throttle_causes(nvml, reasons) if reasons is not None else (),
            lost=lost,
        )


def throttle_causes(nvml: NvmlModule, reasons: int) -> tuple[str, ...]:
    """ "thermal" and/or "power" from a clocks-event-reasons mask (pure). Idle, sync boost
    and application-clock settings are not throttling; HW slowdown is NVIDIA's catch-all
    for thermal or power-brake events, so it counts as both causes' evidence only through
    the specific bits, and as "thermal" alone when no specific bit is set."""
    thermal = (
        nvml.nvmlClocksEventReasonSwThermalSlowdown | nvml.nvmlClocksEventReasonHwThermalSlowdown
    )
    power = nvml.nvmlClocksEventReasonSwPowerCap | nvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
    causes = []
    if reasons & thermal or (
        reasons & nvml.nvmlClocksEventReasonHwSlowdown and not reasons & power
    ):
        causes.append("thermal")
    if reasons & power:
        causes.append("power")
    return tuple(causes)
