"""Accelerator profiles: the hardware-specific parts of a worker pod.

A profile turns ``spec.accelerator.profile`` plus one pool's spec into GPU requests, node
placement (GPU feature discovery labels, the ``nvidia.com/gpu`` taint), shared memory,
transport environment and the rollout shape. Everything here is pure data; ``pods.py``
assembles it into a PodSpec.

The GPU profiles render a basic but schedulable pod today (GPU count, placement,
tolerations, /dev/shm). RDMA resources, NVLink-domain placement and DRA ComputeDomains
plug in here (issue 8) without touching the renderer: extend :class:`HardwareProfile`
and :func:`render_worker_hardware`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tandem.api.v1alpha1 import AcceleratorProfile, KvTransferSpec, PoolSpec

Manifest = dict[str, Any]

GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT_KEY = "nvidia.com/gpu"
# Labels written by NVIDIA GPU feature discovery on real GPU nodes.
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
LABEL_ARCH = "kubernetes.io/arch"


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    """What one accelerator profile knows about its machines."""

    name: AcceleratorProfile
    # Values of GFD's nvidia.com/gpu.product this profile runs on (empty: no GPU).
    gpu_products: tuple[str, ...] = ()
    arch: str = "amd64"
    # Size of the in-memory /dev/shm (NCCL and UCX use it); None keeps the runtime's 64 MiB.
    shm_size: str | None = None
    # UCX_TLS when kvTransfer.ucxTransports is empty; None lets UCX pick.
    default_ucx_tls: str | None = None
    # Whether a rollout may start a new worker before stopping an old one. GPU clusters
    # rarely keep spare GPUs, so their pools replace in place.
    surge: bool = True
    # The reference engine image runs unprivileged; NVIDIA's engine images run as root.
    non_root: bool = True

    @property
    def has_gpus(self) -> bool:
        return bool(self.gpu_products)


PROFILES: Mapping[AcceleratorProfile, HardwareProfile] = {
    AcceleratorProfile.CPU: HardwareProfile(AcceleratorProfile.CPU, default_ucx_tls="tcp"),
    AcceleratorProfile.GB200: HardwareProfile(
        AcceleratorProfile.GB200,
        gpu_products=("NVIDIA-GB200",),
        arch="arm64",
        shm_size="64Gi",
        surge=False,
        non_root=False,
    ),
    AcceleratorProfile.B200: HardwareProfile(
        AcceleratorProfile.B200,
        gpu_products=("NVIDIA-B200",),
        shm_size="64Gi",
        surge=False,
        non_root=False,
    ),
    AcceleratorProfile.H200: HardwareProfile(
        AcceleratorProfile.H200,
        gpu_products=("NVIDIA-H200", "NVIDIA-H200-141GB-HBM3", "NVIDIA-H200-NVL"),
        shm_size="32Gi",
        surge=False,
        non_root=False,
    ),
    AcceleratorProfile.H100: HardwareProfile(
        AcceleratorProfile.H100,
        gpu_products=(
            "NVIDIA-H100-80GB-HBM3",
            "NVIDIA-H100-SXM5-80GB",
            "NVIDIA-H100-PCIe",
            "NVIDIA-H100-NVL",
        ),
        shm_size="32Gi",
        surge=False,
        non_root=False,
    ),
}

# A reference worker with no requests would be packed without limit; this is its floor.
DEFAULT_CPU_REQUESTS: Mapping[str, str] = {"cpu": "1", "memory": "1Gi"}


@dataclass(frozen=True, slots=True)
class WorkerHardware:
    """A profile's contribution to one worker pod."""

    resources: Manifest
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity: Manifest | None = None
    tolerations: list[Manifest] = field(default_factory=list)
    env: list[Manifest] = field(default_factory=list)
    volumes: list[Manifest] = field(default_factory=list)
    volume_mounts: list[Manifest] = field(default_factory=list)
    max_surge: int = 1
    max_unavailable: int = 0
    non_root: bool = True


def get_profile(name: AcceleratorProfile) -> HardwareProfile:
    return PROFILES[name]


def gpus_per_worker(profile: HardwareProfile, pool: PoolSpec) -> int:
    """``gpusPerWorker`` if set, else TP spread over the worker's nodes (0 on cpu)."""
    if pool.gpus_per_worker is not None:
        return pool.gpus_per_worker
    if not profile.has_gpus:
        return 0
    return math.ceil(pool.tensor_parallel_size / pool.nodes_per_worker)


def _quantities(values: Mapping[str, int | str]) -> dict[str, str]:
    # Quantities travel as strings: the API server canonicalizes them that way.
    return {k: str(v) for k, v in values.items()}


def _render_resources(profile: HardwareProfile, pool: PoolSpec) -> Manifest:
    requests = _quantities(pool.resources.requests)
    limits = _quantities(pool.resources.limits)
    if not profile.has_gpus and not requests:
        requests = dict(DEFAULT_CPU_REQUESTS)
    gpus = gpus_per_worker(profile, pool)
    if gpus:
        # Extended resources must have requests == limits.
        requests[GPU_RESOURCE] = str(gpus)
        limits[GPU_RESOURCE] = str(gpus)
    out: Manifest = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _render_affinity(profile: HardwareProfile, pool: PoolSpec) -> Manifest | None:
    if pool.affinity is not None:
        return pool.affinity.as_dict()  # the user's affinity is the last word
    if not profile.has_gpus:
        return None
    expressions = [
        {"key": LABEL_GPU_PRODUCT, "operator": "In", "values": list(profile.gpu_products)},
        {"key": LABEL_ARCH, "operator": "In", "values": [profile.arch]},
    ]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    }


def _render_tolerations(profile: HardwareProfile, pool: PoolSpec) -> list[Manifest]:
    out: list[Manifest] = []
    if profile.has_gpus:
        out.append({"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"})
    out.extend(t.to_wire() for t in pool.tolerations)
    return out


def _render_env(profile: HardwareProfile, kv: KvTransferSpec) -> list[Manifest]:
    ucx_tls = ",".join(kv.ucx_transports) or profile.default_ucx_tls
    return [{"name": "UCX_TLS", "value": ucx_tls}] if ucx_tls else []


def render_worker_hardware(
    profile_name: AcceleratorProfile, pool: PoolSpec, kv: KvTransferSpec
) -> WorkerHardware:
    """The hardware parts of one pool's worker pods."""
    profile = get_profile(profile_name)
    volumes: list[Manifest] = []
    mounts: list[Manifest] = []
    if profile.shm_size:
        volumes.append(
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": profile.shm_size}}
        )
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    return WorkerHardware(
        resources=_render_resources(profile, pool),
        node_selector=dict(pool.node_selector),
        affinity=_render_affinity(profile, pool),
        tolerations=_render_tolerations(profile, pool),
        env=_render_env(profile, kv),
        volumes=volumes,
        volume_mounts=mounts,
        max_surge=1 if profile.surge else 0,
        max_unavailable=0 if profile.surge else 1,
        non_root=profile.non_root,
    )
