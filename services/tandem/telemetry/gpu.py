"""GPU readings and the health verdict drawn from them (pure).

A worker is unhealthy when a GPU it uses has failed in a way that needs a reset or a
replacement: the GPU fell off the bus (NVML reports it lost), the driver counted
uncorrected ECC errors since it loaded, or NVML delivered a critical XID event that is
not an application error. The application-error XIDs (13, 31, 43, 45, 68, 109) are the
ones NVIDIA's Kubernetes device plugin also skips by default: a crashing CUDA program
causes them, not the hardware. Thermal and power throttling slow a GPU without breaking
it: they are warnings (and metrics), never a reason to stop serving.

No NVML library, no driver or no GPU is not a failure: CPU workers report "no GPU" and
stay healthy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})


@dataclass(frozen=True, slots=True)
class GpuSample:
    index: int
    uuid: str
    name: str
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    utilization_ratio: float | None = None
    temperature_celsius: int | None = None
    slowdown_temperature_celsius: int | None = None
    # Uncorrected ECC errors since the driver loaded; None where ECC is unsupported/off.
    ecc_uncorrected_errors: int | None = None
    # Why the clocks are held down right now: "thermal", "power" (empty: they are not).
    throttled: tuple[str, ...] = ()
    lost: bool = False


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    """All GPUs of this process's node as NVML sees them, or why there are none."""

    gpus: tuple[GpuSample, ...] = ()
    driver_version: str | None = None
    # Why no GPU could be read ("nvidia-ml-py is not installed", "no NVIDIA driver"...).
    unavailable_reason: str | None = None

    @property
    def available(self) -> bool:
        return self.unavailable_reason is None and bool(self.gpus)


@dataclass(frozen=True, slots=True)
class HealthVerdict:
    healthy: bool
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def summary(self) -> str:
        if not self.healthy:
            return "unhealthy: " + "; ".join(self.reasons)
        notes = self.reasons + self.warnings
        return "healthy" + (": " + "; ".join(notes) if notes else "")


def judge_health(
    snapshot: GpuSnapshot, xid_counts: Mapping[int, Mapping[int, int]] | None = None
) -> HealthVerdict:
    """``xid_counts`` maps GPU index -> XID -> events seen since the monitor started."""
    if not snapshot.available:
        reason = snapshot.unavailable_reason or "NVML found no GPU"
        return HealthVerdict(True, (f"no GPU: {reason}",))
    failures: list[str] = []
    warnings: list[str] = []
    for gpu in snapshot.gpus:
        label = f"GPU {gpu.index} ({gpu.uuid})"
        if gpu.lost:
            failures.append(f"{label} is lost (fell off the bus or stopped answering NVML)")
            continue
        if gpu.ecc_uncorrected_errors:
            failures.append(
                f"{label} has {gpu.ecc_uncorrected_errors} uncorrected ECC error(s) since the "
                "driver loaded"
            )
        temperature, limit = gpu.temperature_celsius, gpu.slowdown_temperature_celsius
        if temperature is not None and limit is not None and temperature >= limit:
            warnings.append(f"{label} is at {temperature} C, at or above its slowdown {limit} C")
        for cause in gpu.throttled:
            warnings.append(f"{label} is {cause}-throttled")
    for index, counts in sorted((xid_counts or {}).items()):
        fatal = sorted(x for x, n in counts.items() if n and x not in APPLICATION_XIDS)
        if fatal:
            failures.append(f"GPU {index} reported critical XID(s) {', '.join(map(str, fatal))}")
    return HealthVerdict(not failures, tuple(failures), tuple(warnings))
