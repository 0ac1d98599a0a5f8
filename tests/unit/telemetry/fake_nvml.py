"""A fake ``pynvml`` following nvidia-ml-py 13.615.71 (pynvml.py) for machines with no GPU.

Same function names, argument order, constants and error model: every failure is an
``NVMLError`` subclass whose ``.value`` is the ``NVML_ERROR_*`` code (pynvml builds
``NVMLError_<Name>`` classes from those codes). Only the functions Tandem calls exist.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass, field

NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
nvmlEventTypeXidCriticalError = 0x0000000000000008
# nvmlClocksEventReason* bits (pynvml.py, nvidia-ml-py 13.615.71).
nvmlClocksEventReasonGpuIdle = 0x0000000000000001
nvmlClocksEventReasonSwPowerCap = 0x0000000000000004
nvmlClocksEventReasonHwSlowdown = 0x0000000000000008
nvmlClocksEventReasonSwThermalSlowdown = 0x0000000000000020
nvmlClocksEventReasonHwThermalSlowdown = 0x0000000000000040
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x0000000000000080

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class c_nvmlMemory_t:
    total: int
    free: int
    used: int


@dataclass
class c_nvmlUtilization_t:
    gpu: int
    memory: int


@dataclass
class c_nvmlEventData_t:
    device: int
    eventType: int
    eventData: int


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    total: int = 80 * 10**9
    used: int = 10 * 10**9
    utilization: int = 42
    temperature: int = 55
    slowdown: int = 87
    ecc_uncorrected: int | None = 0  # None: ECC not supported
    clocks_event_reasons: int | None = nvmlClocksEventReasonGpuIdle  # None: not supported
    lost: bool = False


@dataclass
class FakeNvml:
    """Use an instance where pynvml (the module) is expected."""

    gpus: list[FakeGpu] = field(default_factory=list)
    driver_missing: bool = False
    events: queue.Queue[c_nvmlEventData_t] = field(default_factory=queue.Queue)
    initialised: bool = False
    registered: list[int] = field(default_factory=list)

    NVMLError = NVMLError
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = NVML_VOLATILE_ECC
    nvmlEventTypeXidCriticalError = nvmlEventTypeXidCriticalError
    nvmlClocksEventReasonSwPowerCap = nvmlClocksEventReasonSwPowerCap
    nvmlClocksEventReasonHwSlowdown = nvmlClocksEventReasonHwSlowdown
    nvmlClocksEventReasonSwThermalSlowdown = nvmlClocksEventReasonSwThermalSlowdown
    nvmlClocksEventReasonHwThermalSlowdown = nvmlClocksEventReasonHwThermalSlowdown
    nvmlClocksEventReasonHwPowerBrakeSlowdown = nvmlClocksEventReasonHwPowerBrakeSlowdown

    def nvmlInit(self) -> None:
        if self.driver_missing:
            raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.95.05"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if not 0 <= index < len(self.gpus):
            raise NVMLError(2)
        return index

    def nvmlDeviceGetIndex(self, handle: int) -> int:
        return handle

    def _gpu(self, handle: int) -> FakeGpu:
        gpu = self.gpus[handle]
        if gpu.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return gpu

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        self._gpu(handle)
        return f"GPU-0000000{handle}-fake"

    def nvmlDeviceGetMemoryInfo(self, handle: int, version: int | None = None) -> c_nvmlMemory_t:
        gpu = self._gpu(handle)
        return c_nvmlMemory_t(gpu.total, gpu.total - gpu.used, gpu.used)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> c_nvmlUtilization_t:
        return c_nvmlUtilization_t(self._gpu(handle).utilization, 10)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        assert sensor == NVML_TEMPERATURE_GPU
        return self._gpu(handle).temperature

    def nvmlDeviceGetTemperatureThreshold(self, handle: int, threshold: int) -> int:
        assert threshold == NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        return self._gpu(handle).slowdown

    def nvmlDeviceGetTotalEccErrors(self, handle: int, errorType: int, counterType: int) -> int:
        assert (errorType, counterType) == (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)
        count = self._gpu(handle).ecc_uncorrected
        if count is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return count

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        reasons = self._gpu(handle).clocks_event_reasons
        if reasons is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return reasons

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle: int, eventTypes: int, eventSet: str) -> None:
        assert eventTypes == nvmlEventTypeXidCriticalError and eventSet == "event-set"
        self.registered.append(handle)

    def nvmlEventSetWait_v2(self, eventSet: str, timeoutms: int) -> c_nvmlEventData_t:
        try:
            return self.events.get(timeout=timeoutms / 1000)
        except queue.Empty:
            raise NVMLError(NVML_ERROR_TIMEOUT) from None

    def nvmlEventSetFree(self, eventSet: str) -> None:
        pass

    def emit_xid(self, gpu: int, xid: int) -> None:
        """Test hook: the driver reports an XID on ``gpu``."""
        self.events.put(c_nvmlEventData_t(gpu, nvmlEventTypeXidCriticalError, xid))
