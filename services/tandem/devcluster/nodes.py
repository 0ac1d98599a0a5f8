"""Simulated node profiles for the dev cluster: pure functions returning Node manifests.

kwok manages every Node carrying the annotation ``kwok.x-k8s.io/node: fake`` and keeps the
``status.capacity``/``status.allocatable`` we create them with, so the real scheduler
places pods against GPU counts exactly as on a GPU cluster.

Labels follow what NVIDIA's GPU feature discovery writes on real nodes
(``nvidia.com/gpu.product``, ``.count``, ``.memory`` in MiB, ``.family``, and for GB200
``nvidia.com/gpu.clique`` = ``<cluster uuid>.<clique id>``), plus Tandem's own
``tandem.dev/*`` topology labels so placement code need not parse the clique string.

GPU nodes carry the taint ``nvidia.com/gpu:NoSchedule`` (key only, no value), as GPU
operator / managed GPU node pools commonly do: a pod lands on a GPU node only when it
tolerates ``nvidia.com/gpu`` (``operator: Exists``). CPU nodes are untainted.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NotRequired, TypedDict

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"

GPU_RESOURCE = "nvidia.com/gpu"
RDMA_RESOURCE = "rdma/ib"
GPU_TAINT_KEY = "nvidia.com/gpu"

LABEL_GPU_PRESENT = "nvidia.com/gpu.present"
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
LABEL_GPU_COUNT = "nvidia.com/gpu.count"
LABEL_GPU_MEMORY = "nvidia.com/gpu.memory"
LABEL_GPU_FAMILY = "nvidia.com/gpu.family"
LABEL_GPU_CLIQUE = "nvidia.com/gpu.clique"
LABEL_ACCELERATOR = "tandem.dev/accelerator"
LABEL_NVL72_DOMAIN = "tandem.dev/nvl72-domain"
LABEL_RACK = "tandem.dev/rack"
LABEL_ARCH = "kubernetes.io/arch"
LABEL_OS = "kubernetes.io/os"
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
# On every simulated node (never on the real one).
KWOK_NODE_LABEL = ("type", "kwok")

# Fixed namespace so the clique ids are stable across runs (the functions stay pure).
_CLIQUE_NAMESPACE = uuid.UUID("6f1d2c1e-8a4b-4e8e-9a57-3d1c0b7a2e10")


class Taint(TypedDict):
    key: str
    effect: str


class NodeMetadata(TypedDict):
    name: str
    labels: dict[str, str]
    annotations: dict[str, str]


class NodeSpec(TypedDict):
    taints: NotRequired[list[Taint]]


class NodeStatus(TypedDict):
    capacity: dict[str, str]
    allocatable: dict[str, str]
    nodeInfo: dict[str, str]


class NodeManifest(TypedDict):
    apiVersion: str
    kind: str
    metadata: NodeMetadata
    spec: NodeSpec
    status: NodeStatus


@dataclass(frozen=True, slots=True)
class GpuModel:
    """One GPU product as GPU feature discovery describes it."""

    accelerator: str  # Tandem's accelerator profile name
    product: str
    family: str
    memory_mib: int


@dataclass(frozen=True, slots=True)
class MachineShape:
    """Capacity of one machine type; allocatable leaves a system reserve, as kubelets do."""

    instance_type: str
    arch: str
    cpu: int
    memory_gi: int
    reserved_cpu: int
    reserved_memory_gi: int
    gpus: int = 0
    gpu: GpuModel | None = None
    rdma: int = 0
    pods: int = 110


GB200 = GpuModel(accelerator="gb200", product="NVIDIA-GB200", family="blackwell", memory_mib=189471)
B200 = GpuModel(accelerator="b200", product="NVIDIA-B200", family="blackwell", memory_mib=183359)
H100 = GpuModel(
    accelerator="h100", product="NVIDIA-H100-80GB-HBM3", family="hopper", memory_mib=81559
)

# A GB200 compute tray: 2 Grace CPUs (72 Arm cores each), 4 Blackwell GPUs, 4 ConnectX NICs.
GB200_TRAY = MachineShape(
    instance_type="gb200-nvl72-tray",
    arch="arm64",
    cpu=144,
    memory_gi=960,
    reserved_cpu=2,
    reserved_memory_gi=16,
    gpus=4,
    gpu=GB200,
    rdma=4,
)


def _hgx_server(instance_type: str, gpu: GpuModel) -> MachineShape:
    """An HGX/DGX-style 8-GPU x86 server with one RDMA NIC per GPU."""
    return MachineShape(
        instance_type=instance_type,
        arch="amd64",
        cpu=224,
        memory_gi=2048,
        reserved_cpu=4,
        reserved_memory_gi=32,
        gpus=8,
        gpu=gpu,
        rdma=8,
    )


B200_SERVER = _hgx_server("b200-8gpu", B200)
H100_SERVER = _hgx_server("h100-8gpu", H100)
CPU_SERVER = MachineShape(
    instance_type="cpu-32",
    arch="amd64",
    cpu=32,
    memory_gi=128,
    reserved_cpu=1,
    reserved_memory_gi=4,
)


@dataclass(frozen=True, slots=True)
class NodeProfile:
    """How many simulated nodes of each kind a dev cluster gets."""

    name: str
    description: str
    nvl72_domains: int = 0
    trays_per_domain: int = 0
    b200: int = 0
    h100: int = 0
    cpu: int = 0
    # A real kubelet + containerd on this machine joins as node "localhost" (root only;
    # tandem.devcluster.realnode). Such profiles have no simulated CPU nodes: pods without
    # a GPU toleration can only land on the real node, so no real pod is ever given a
    # simulated pod as a peer.
    real_node: bool = False


PROFILES: Mapping[str, NodeProfile] = {
    p.name: p
    for p in (
        NodeProfile(
            name="default",
            description="2 GB200 NVL72 domains x 4 trays, 2 B200, 2 H100, 3 CPU nodes",
            nvl72_domains=2,
            trays_per_domain=4,
            b200=2,
            h100=2,
            cpu=3,
        ),
        NodeProfile(name="cpu", description="3 CPU nodes, no GPUs", cpu=3),
        NodeProfile(
            name="real",
            description="a real node (kubelet + containerd on this machine, needs root), "
            "1 GB200 NVL72 domain x 2 trays, 1 B200, 1 H100; no simulated CPU nodes",
            nvl72_domains=1,
            trays_per_domain=2,
            b200=1,
            h100=1,
            real_node=True,
        ),
        NodeProfile(
            name="nvl72",
            description="2 full GB200 NVL72 domains (18 trays each) and 2 CPU nodes",
            nvl72_domains=2,
            trays_per_domain=18,
            cpu=2,
        ),
    )
}


def get_profile(name: str) -> NodeProfile:
    """The named profile; ValueError listing the known names otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise ValueError(f"unknown node profile {name!r} (known: {known})") from None


def compute_clique_id(domain: int) -> str:
    """GFD-style clique label value for an NVL72 domain: ``<cluster uuid>.<clique id>``."""
    cluster_uuid = uuid.uuid5(_CLIQUE_NAMESPACE, f"nvl72-domain-{domain}")
    return f"{cluster_uuid}.0"


def render_node(
    name: str, shape: MachineShape, *, extra_labels: Mapping[str, str] | None = None
) -> NodeManifest:
    """A kwok-managed Node of the given machine shape."""
    labels = {
        LABEL_ARCH: shape.arch,
        LABEL_OS: "linux",
        LABEL_HOSTNAME: name,
        LABEL_INSTANCE_TYPE: shape.instance_type,
        KWOK_NODE_LABEL[0]: KWOK_NODE_LABEL[1],
    }
    capacity = {
        "cpu": str(shape.cpu),
        "memory": f"{shape.memory_gi}Gi",
        "pods": str(shape.pods),
        "ephemeral-storage": "1Ti",
    }
    allocatable = dict(capacity)
    allocatable["cpu"] = str(shape.cpu - shape.reserved_cpu)
    allocatable["memory"] = f"{shape.memory_gi - shape.reserved_memory_gi}Gi"
    spec: NodeSpec = {}
    if shape.gpu is not None and shape.gpus > 0:
        labels |= {
            LABEL_GPU_PRESENT: "true",
            LABEL_GPU_PRODUCT: shape.gpu.product,
            LABEL_GPU_COUNT: str(shape.gpus),
            LABEL_GPU_MEMORY: str(shape.gpu.memory_mib),
            LABEL_GPU_FAMILY: shape.gpu.family,
            LABEL_ACCELERATOR: shape.gpu.accelerator,
        }
        for resources in (capacity, allocatable):
            resources[GPU_RESOURCE] = str(shape.gpus)
            if shape.rdma:
                resources[RDMA_RESOURCE] = str(shape.rdma)
        spec["taints"] = [{"key": GPU_TAINT_KEY, "effect": "NoSchedule"}]
    else:
        labels[LABEL_ACCELERATOR] = "cpu"
    labels |= dict(extra_labels or {})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE},
        },
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "nodeInfo": render_node_info(shape.arch),
        },
    }


def render_node_info(arch: str) -> dict[str, str]:
    """Node.status.nodeInfo with the architecture set. The schema requires every field;
    kwok replaces the empty ones with its own values (and would report amd64 for all)."""
    empty = (
        "bootID containerRuntimeVersion kernelVersion kubeProxyVersion kubeletVersion "
        "machineID osImage systemUUID"
    )
    return {"architecture": arch, "operatingSystem": "linux"} | dict.fromkeys(empty.split(), "")


def render_gb200_tray(domain: int, tray: int) -> NodeManifest:
    """One compute tray of NVL72 domain ``domain``; an NVL72 domain is one rack."""
    return render_node(
        f"gb200-d{domain}-t{tray:02d}",
        GB200_TRAY,
        extra_labels={
            LABEL_GPU_CLIQUE: compute_clique_id(domain),
            LABEL_NVL72_DOMAIN: f"nvl72-{domain}",
            LABEL_RACK: f"rack-{domain}",
        },
    )


def render_profile(profile: NodeProfile) -> list[NodeManifest]:
    """Every Node of a profile, in a stable order (GB200, B200, H100, CPU)."""
    nodes = [
        render_gb200_tray(domain, tray)
        for domain in range(profile.nvl72_domains)
        for tray in range(profile.trays_per_domain)
    ]
    nodes += [render_node(f"b200-{i}", B200_SERVER) for i in range(profile.b200)]
    nodes += [render_node(f"h100-{i}", H100_SERVER) for i in range(profile.h100)]
    nodes += [render_node(f"cpu-{i}", CPU_SERVER) for i in range(profile.cpu)]
    return nodes
