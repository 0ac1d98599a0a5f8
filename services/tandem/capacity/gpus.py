"""GPU memory per accelerator profile.

Capacities are NVIDIA's published HBM figures in decimal gigabytes, which sit a few
percent below what the driver reports, so a plan that fits here fits on the card:

* GB200 (NVL72): 186 GB per Blackwell GPU — "up to 13.4 TB HBM3e" per 72-GPU rack
  (NVIDIA GB200 NVL72 product specifications); 4 GPUs per compute tray.
* B200: 180 GB — "1,440 GB total GPU memory" for 8 GPUs (NVIDIA DGX B200 datasheet).
* H200: 141 GB HBM3e (NVIDIA H200 Tensor Core GPU datasheet, SXM).
* H100: 80 GB HBM3 (NVIDIA H100 Tensor Core GPU datasheet, SXM).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from tandem.api.v1alpha1 import AcceleratorProfile

GB = 1_000_000_000


class GpuArchitecture(enum.StrEnum):
    BLACKWELL = "blackwell"
    HOPPER = "hopper"


@dataclass(frozen=True, slots=True)
class GpuSpec:
    profile: AcceleratorProfile
    product: str
    memory_bytes: int
    architecture: GpuArchitecture
    gpus_per_node: int
    source: str


GPUS: Mapping[AcceleratorProfile, GpuSpec] = {
    AcceleratorProfile.GB200: GpuSpec(
        AcceleratorProfile.GB200,
        "NVIDIA GB200",
        186 * GB,
        GpuArchitecture.BLACKWELL,
        4,
        "GB200 NVL72 specifications: up to 13.4 TB HBM3e per 72 GPUs",
    ),
    AcceleratorProfile.B200: GpuSpec(
        AcceleratorProfile.B200,
        "NVIDIA B200",
        180 * GB,
        GpuArchitecture.BLACKWELL,
        8,
        "DGX B200 datasheet: 1,440 GB total GPU memory for 8 GPUs",
    ),
    AcceleratorProfile.H200: GpuSpec(
        AcceleratorProfile.H200,
        "NVIDIA H200",
        141 * GB,
        GpuArchitecture.HOPPER,
        8,
        "H200 datasheet: 141 GB HBM3e",
    ),
    AcceleratorProfile.H100: GpuSpec(
        AcceleratorProfile.H100,
        "NVIDIA H100",
        80 * GB,
        GpuArchitecture.HOPPER,
        8,
        "H100 SXM datasheet: 80 GB HBM3",
    ),
}


def gpu_for(profile: AcceleratorProfile) -> GpuSpec:
    try:
        return GPUS[profile]
    except KeyError:
        raise ValueError(f"accelerator profile {profile.value!r} has no GPU") from None
