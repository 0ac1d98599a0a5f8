"""Accelerator profiles: the hardware-specific parts of a worker pod.

A profile turns ``spec.accelerator.profile`` plus one pool's spec into GPU and RDMA
requests, node placement (GPU feature discovery labels, the ``nvidia.com/gpu`` taint,
NVLink-domain affinity), the DRA channel claim of a ComputeDomain, shared memory, the
UCX/NIXL/NCCL environment, capabilities and the rollout shape. Everything here is pure
data; ``pods.py`` assembles it into a PodSpec, ``fabric.py`` and ``placement.py`` hold the
RDMA/transport and NVLink details.

=======  ==========  =====  ===========================================================
profile  GPUs/node   arch   specifics
=======  ==========  =====  ===========================================================
gb200    4 (a tray)  arm64  NVL72 domains: same-domain affinity, ComputeDomain channel
                            claim on whole-tray workers, NCCL multi-node NVLink on
b200     8           amd64  HGX B200
h200     8           amd64  Hopper; MoE kernels differ (see tandem.engines.trtllm)
h100     8           amd64  Hopper
cpu      -           any    reference engine: CPU/memory requests, UCX over TCP
=======  ==========  =====  ===========================================================

The worker image is the same reference on every GPU profile: NVIDIA's TensorRT-LLM
release images are multi-platform (linux/amd64 and linux/arm64, per NVIDIA's gpt-oss
deployment guide, TensorRT-LLM PR 7101, and the NGC multi-platform build, PR 4191), and
so is the Tandem worker image built on them; ``kubernetes.io/arch`` in the node affinity
makes the runtime pull the arm64 variant on GB200's Grace hosts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tandem.api.v1alpha1 import AcceleratorProfile, KvTransferSpec, PoolRole, PoolSpec
from tandem_operator.render.fabric import (
    GPU_UCX_TLS,
    RdmaOptions,
    render_nccl_env,
    render_rdma_resources,
    render_ucx_env,
)
from tandem_operator.render.placement import render_channel_claim, render_nvlink_pod_affinity

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
    # GPUs of one node (a GB200 compute tray holds 4).
    gpus_per_node: int = 0
    # Nodes are grouped in multi-node NVLink domains (GB200 NVL72): same-domain affinity
    # and ComputeDomain channel claims.
    nvlink_domains: bool = False
    # Size of the in-memory /dev/shm (NCCL and UCX use it); None keeps the runtime's 64 MiB.
    shm_size: str | None = None
    # UCX_TLS entries when kvTransfer.ucxTransports is empty; () lets UCX pick.
    default_ucx_tls: tuple[str, ...] = ()
    # Whether a rollout may start a new worker before stopping an old one. GPU clusters
    # rarely keep spare GPUs, so their pools replace in place.
    surge: bool = True
    # The reference engine image runs unprivileged; NVIDIA's engine images run as root.
    non_root: bool = True

    @property
    def has_gpus(self) -> bool:
        return bool(self.gpu_products)


PROFILES: Mapping[AcceleratorProfile, HardwareProfile] = {
    AcceleratorProfile.CPU: HardwareProfile(AcceleratorProfile.CPU, default_ucx_tls=("tcp",)),
    AcceleratorProfile.GB200: HardwareProfile(
        AcceleratorProfile.GB200,
        gpu_products=("NVIDIA-GB200",),
        arch="arm64",
        gpus_per_node=4,
        nvlink_domains=True,
        shm_size="64Gi",
        default_ucx_tls=GPU_UCX_TLS,
        surge=False,
        non_root=False,
    ),
    AcceleratorProfile.B200: HardwareProfile(
        AcceleratorProfile.B200,
        gpu_products=("NVIDIA-B200",),
        gpus_per_node=8,
        shm_size="64Gi",
        default_ucx_tls=GPU_UCX_TLS,
        surge=False,
        non_root=False,
    ),
    AcceleratorProfile.H200: HardwareProfile(
        AcceleratorProfile.H200,
        gpu_products=("NVIDIA-H200", "NVIDIA-H200-141GB-HBM3", "NVIDIA-H200-NVL"),
        gpus_per_node=8,
        shm_size="32Gi",
        default_ucx_tls=GPU_UCX_TLS,
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
        gpus_per_node=8,
        shm_size="32Gi",
        default_ucx_tls=GPU_UCX_TLS,
        surge=False,
        non_root=False,
    ),
}

# kube-scheduler scores a ScheduleAnyway spread by (pods on the node x log(nodes) +
# maxSkew - 1), normalized across nodes: with a large maxSkew a few pods more or less on a
# node barely move the score, next to the NVLink affinity's.
LOOSE_SPREAD_MAX_SKEW = 64

# A reference worker with no requests would be packed without limit; this is its floor.
# Memory: a SmolLM2 worker holds ~1.2 GiB from start-up (weights, and its 384 MiB KV pool
# reserved at start), so the scheduler counts what the pod really uses.
DEFAULT_CPU_REQUESTS: Mapping[str, str] = {"cpu": "1", "memory": "1536Mi"}


@dataclass(frozen=True, slots=True)
class HardwareOptions:
    """Operator-wide facts about the cluster's GPU nodes (flags / chart values)."""

    # Render a ComputeDomain per GB200 cluster and channel claims on whole-tray workers
    # (needs NVIDIA's DRA driver for GPUs with ComputeDomain support).
    compute_domains: bool = True
    rdma: RdmaOptions = field(default_factory=RdmaOptions)


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
    # Linux capabilities the worker container adds (IPC_LOCK: pin memory for RDMA).
    capabilities: tuple[str, ...] = ()
    # DRA: the pod's spec.resourceClaims and the container's resources.claims.
    resource_claims: list[Manifest] = field(default_factory=list)
    container_claims: list[Manifest] = field(default_factory=list)
    # How unevenly a pool's pods may sit on hosts before the scheduler prefers another
    # host (a best-effort score). 1 spreads. Where NVLink-domain affinity decides placement
    # it is LOOSE_SPREAD_MAX_SKEW: practically neutral, so it neither pushes pods out of
    # their domain nor apart when they should pack, yet explicit, which keeps the
    # scheduler's default spreading (applied to pods without constraints) out too.
    spread_max_skew: int = 1


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


def whole_nodes(profile: HardwareProfile, pool: PoolSpec) -> bool:
    """Does each worker pod take all GPUs of its node (a whole GB200 tray)?"""
    return profile.gpus_per_node > 0 and gpus_per_worker(profile, pool) >= profile.gpus_per_node


def _render_resources(profile: HardwareProfile, pool: PoolSpec, rdma: RdmaOptions) -> Manifest:
    requests = _quantities(pool.resources.requests)
    limits = _quantities(pool.resources.limits)
    if not profile.has_gpus and not requests:
        requests = dict(DEFAULT_CPU_REQUESTS)
    gpus = gpus_per_worker(profile, pool)
    extended = {GPU_RESOURCE: str(gpus)} if gpus else {}
    if profile.has_gpus:
        extended |= render_rdma_resources(gpus, rdma)
    for name, value in extended.items():
        # Extended resources must have requests == limits; the user's values win.
        requests.setdefault(name, value)
        limits.setdefault(name, requests[name])
    out: Manifest = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _render_affinity(
    profile: HardwareProfile, pool: PoolSpec, cluster: str, role: PoolRole
) -> Manifest | None:
    if pool.affinity is not None:
        return pool.affinity.as_dict()  # the user's affinity is the last word
    if not profile.has_gpus:
        return None
    expressions = [
        {"key": LABEL_GPU_PRODUCT, "operator": "In", "values": list(profile.gpu_products)},
        {"key": LABEL_ARCH, "operator": "In", "values": [profile.arch]},
    ]
    affinity: Manifest = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    }
    if profile.nvlink_domains and cluster:
        affinity["podAffinity"] = render_nvlink_pod_affinity(
            cluster, role, packs_nodes=not whole_nodes(profile, pool)
        )
    return affinity


def _render_tolerations(profile: HardwareProfile, pool: PoolSpec) -> list[Manifest]:
    out: list[Manifest] = []
    if profile.has_gpus:
        out.append({"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"})
    out.extend(t.to_wire() for t in pool.tolerations)
    return out


def uses_channel_claim(
    profile: HardwareProfile, pool: PoolSpec, cluster: str, options: HardwareOptions
) -> bool:
    """Whether the pool's pods join the cluster's ComputeDomain (see ``placement``)."""
    return (
        profile.nvlink_domains
        and options.compute_domains
        and bool(cluster)
        and whole_nodes(profile, pool)
    )


def render_worker_hardware(
    profile_name: AcceleratorProfile,
    pool: PoolSpec,
    kv: KvTransferSpec,
    *,
    cluster: str = "",
    role: PoolRole = PoolRole.DECODE,
    options: HardwareOptions | None = None,
) -> WorkerHardware:
    """The hardware parts of one pool's worker pods.

    ``cluster`` (the InferenceCluster's name) keys NVLink-domain affinity and the
    ComputeDomain claim; without it only node-level placement is rendered."""
    profile = get_profile(profile_name)
    options = options or HardwareOptions()
    claim = uses_channel_claim(profile, pool, cluster, options)
    env = render_ucx_env(kv, profile.default_ucx_tls, options.rdma, gpu=profile.has_gpus)
    if profile.has_gpus:
        env += render_nccl_env(options.rdma, multi_node_nvlink=claim)
    pod_claims: list[Manifest] = []
    container_claims: list[Manifest] = []
    if claim:
        pod_claim, container_claim = render_channel_claim(cluster)
        pod_claims, container_claims = [pod_claim], [container_claim]
    volumes: list[Manifest] = []
    mounts: list[Manifest] = []
    if profile.shm_size:
        volumes.append(
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": profile.shm_size}}
        )
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    return WorkerHardware(
        resources=_render_resources(profile, pool, options.rdma),
        node_selector=dict(pool.node_selector),
        affinity=_render_affinity(profile, pool, cluster, role),
        tolerations=_render_tolerations(profile, pool),
        env=env,
        volumes=volumes,
        volume_mounts=mounts,
        max_surge=1 if profile.surge else 0,
        max_unavailable=0 if profile.surge else 1,
        non_root=profile.non_root,
        capabilities=("IPC_LOCK",) if profile.has_gpus else (),
        resource_claims=pod_claims,
        container_claims=container_claims,
        spread_max_skew=LOOSE_SPREAD_MAX_SKEW if profile.nvlink_domains and cluster else 1,
    )
