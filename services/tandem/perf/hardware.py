"""Datasheet performance of each accelerator profile: what the simulated clock runs on.

Per GPU, dense (no sparsity), from NVIDIA's public datasheets (collected in
``shared/notes/stack-facts.md``, Dec 2026; the link rates the calibration derives from:
https://www.nvidia.com/en-us/data-center/gb200-nvl72/ and
https://docs.nvidia.com/dgx/dgxb200-user-guide/introduction-to-dgxb200.html):

* GB200 (NVL72): HBM3e 8 TB/s; FP8 5 PFLOPS, BF16 2.5 PFLOPS; NVLink 5 at 1.8 TB/s per
  GPU (both directions, so 900 GB/s each way) reaches every GPU of the 72-GPU domain,
  so prefill and decode workers of one domain move KV over NVLink.
* B200 (HGX/DGX B200): HBM3e 8 TB/s; FP8 4.5 PFLOPS, BF16 2.25 PFLOPS; NVLink 5 inside
  the 8-GPU node; between nodes one ConnectX-7 400 Gb/s RDMA rail per GPU (DGX B200
  datasheet: 8 x 400 Gb/s compute ports).
* H200: HBM3e 4.8 TB/s; FP8 1.98 PFLOPS, BF16 0.99 PFLOPS (Hopper's tensor cores, as
  H100); ConnectX-7 400 Gb/s per GPU between nodes.
* H100 SXM: HBM3 3.35 TB/s; FP8 1.98 PFLOPS, BF16 0.99 PFLOPS; ConnectX-7 400 Gb/s.

Below the GPU, the KV offload tiers (``kvCache.offload``; the simulated engine onboards
blocks from them at these rates):

* Host link. GB200: NVLink-C2C between the Grace CPU and its two Blackwell GPUs, 900 GB/s
  bidirectional per superchip (NVIDIA's figure as summaries of the GB200 superchip quote
  it, e.g. https://ziash.github.io/nvidia-nca-aiio-study-guide/nvidia-portfolio/superchips/;
  not re-read at NVIDIA), taken as 450 GB/s each way shared by two GPUs: 225 GB/s per
  GPU, a floor if each GPU has its own 900 GB/s. B200, H200, H100: PCIe Gen5 x16 to the
  host, 64 GB/s each way (DGX B200 user guide: Xeon 8570 "PCIe Gen5" CPUs; DGX
  H100/H200: "PCIe 5.0 support", https://docs.nvidia.com/dgx-basepod/reference-
  architecture-infrastructure-foundation-enterprise-ai/latest/core-components.html).
* Local disk: the nodes' NVMe cache drives (DGX B200: 8 x 3.84 TB NVMe U.2 in RAID 0;
  DGX H100/H200 the same; DGX GB200 compute trays: E1.S NVMe drives in RAID 0,
  https://docs.nvidia.com/dgx/dgxgb200-user-guide/storage.html), taken as one drive's
  share per GPU at 7 GB/s: the drive models are not published, and 7 GB/s is just under
  what a drive's PCIe Gen4 x4 link carries (4 lanes x 16 GT/s, 128b/130b: 7.9 GB/s), the
  class of current enterprise U.2 drives -- an assumption, as the efficiencies are.

KV moves between *workers*, which the autoscaler places on different nodes, so the KV
link of a profile is the one between nodes: NVLink inside a GB200 NVL72 domain, RDMA
elsewhere. A worker of TP ranks moves its shards in parallel over TP links.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from tandem.api.v1alpha1 import AcceleratorProfile

TB = 1e12
PFLOPS = 1e15
GB = 1e9


class LinkKind(enum.StrEnum):
    NVLINK5 = "nvlink5"
    RDMA_400G = "rdma-400g"
    NVLINK_C2C = "nvlink-c2c"
    PCIE5_X16 = "pcie5-x16"
    NVME = "nvme"


@dataclass(frozen=True, slots=True)
class KvLink:
    """A link one GPU moves KV over: to a GPU of another worker, or to and from an
    offload tier."""

    kind: LinkKind
    bytes_per_second: float  # one direction, per GPU
    # Fraction of the line rate a large transfer reaches: assumed (85% RDMA, 95% NVLink),
    # not published; docs/simulated-engine.md ("Calibration") sets the resulting times
    # against the line rates of the datasheets.
    efficiency: float
    latency_s: float  # per transfer: the handshake and the first descriptor

    @property
    def effective_bytes_per_second(self) -> float:
        return self.bytes_per_second * self.efficiency


@dataclass(frozen=True, slots=True)
class GpuPerformance:
    profile: AcceleratorProfile
    hbm_bytes_per_second: float
    fp8_flops: float
    bf16_flops: float
    # Bandwidth of the tensor-parallel all-reduce inside a worker (NVLink in every GPU
    # profile here), one direction per GPU.
    nvlink_bytes_per_second: float
    kv_link: KvLink
    source: str
    # Where offloaded KV comes back from (see the module docstring), per GPU.
    host_link: KvLink
    disk_link: KvLink


_NVLINK5 = 900 * GB  # 1.8 TB/s per GPU, both directions
_NVLINK4 = 450 * GB  # Hopper: 900 GB/s per GPU, both directions
_RDMA_400G = KvLink(LinkKind.RDMA_400G, 50 * GB, 0.85, 50e-6)
# Efficiencies and latencies assumed like the KV links': a bulk DMA copy (C2C, PCIe) and a
# large sequential NVMe read (tens of microseconds to the first byte).
_NVLINK_C2C = KvLink(LinkKind.NVLINK_C2C, 225 * GB, 0.9, 5e-6)
_PCIE5_X16 = KvLink(LinkKind.PCIE5_X16, 64 * GB, 0.8, 10e-6)
_NVME_GEN4 = KvLink(LinkKind.NVME, 7 * GB, 0.9, 100e-6)

PERFORMANCE: Mapping[AcceleratorProfile, GpuPerformance] = {
    AcceleratorProfile.GB200: GpuPerformance(
        AcceleratorProfile.GB200,
        8 * TB,
        5 * PFLOPS,
        2.5 * PFLOPS,
        _NVLINK5,
        KvLink(LinkKind.NVLINK5, _NVLINK5, 0.95, 10e-6),
        "GB200 NVL72 datasheet: 8 TB/s HBM3e, FP8 5 PFLOPS dense, NVLink 5 1.8 TB/s per GPU",
        host_link=_NVLINK_C2C,
        disk_link=_NVME_GEN4,
    ),
    AcceleratorProfile.B200: GpuPerformance(
        AcceleratorProfile.B200,
        8 * TB,
        4.5 * PFLOPS,
        2.25 * PFLOPS,
        _NVLINK5,
        _RDMA_400G,
        "DGX B200 datasheet: 8 TB/s HBM3e, FP8 4.5 PFLOPS dense, 8 x 400 Gb/s ConnectX-7",
        host_link=_PCIE5_X16,
        disk_link=_NVME_GEN4,
    ),
    AcceleratorProfile.H200: GpuPerformance(
        AcceleratorProfile.H200,
        4.8 * TB,
        1.98 * PFLOPS,
        0.99 * PFLOPS,
        _NVLINK4,
        _RDMA_400G,
        "H200 datasheet: 4.8 TB/s HBM3e, FP8 1.98 PFLOPS dense; ConnectX-7 400 Gb/s",
        host_link=_PCIE5_X16,
        disk_link=_NVME_GEN4,
    ),
    AcceleratorProfile.H100: GpuPerformance(
        AcceleratorProfile.H100,
        3.35 * TB,
        1.98 * PFLOPS,
        0.99 * PFLOPS,
        _NVLINK4,
        _RDMA_400G,
        "H100 SXM datasheet: 3.35 TB/s HBM3, FP8 1.98 PFLOPS dense; ConnectX-7 400 Gb/s",
        host_link=_PCIE5_X16,
        disk_link=_NVME_GEN4,
    ),
}


def performance_for(profile: AcceleratorProfile) -> GpuPerformance:
    try:
        return PERFORMANCE[profile]
    except KeyError:
        known = ", ".join(p.value for p in PERFORMANCE)
        raise ValueError(
            f"accelerator profile {profile.value!r} has no GPU to simulate; known: {known}"
        ) from None
