"""The data-path fabric of a GPU worker pod: RDMA devices and the UCX/NIXL/NCCL environment.

Pure functions; ``profiles.render_worker_hardware`` assembles them.

RDMA comes from a device plugin (NVIDIA Network Operator: the RDMA shared device plugin
or SR-IOV), as an extended resource the pod requests, e.g. ``rdma/ib`` (one NIC per GPU
on rail-optimized GB200/HGX systems, which the simulated nodes mirror) or
``rdma/rdma_shared_device_a`` (shared, request 1). The container then sees only its
allocated NICs, so ``UCX_NET_DEVICES`` is left to UCX (it picks the NIC nearest each GPU);
it is set only when an operator names the devices. Host networking with ``/dev/infiniband``
is not rendered: it needs privileged pods for the device cgroup and collides on the
worker's fixed ports as soon as two workers share a node.

Registering GPU memory with the NIC pins it: the container gets ``IPC_LOCK``.

UCX (under NIXL and TensorRT-LLM's cache transceiver):

* ``UCX_TLS`` — ``kvTransfer.ucxTransports``, else the profile's default: RDMA (``rc``)
  between nodes, ``cuda_ipc`` between GPUs that share NVLink (a node, or an NVL72 rack
  with an IMEX channel), ``cuda_copy`` for staging, ``sm``/``self`` within the pod. No
  ``tcp``: a cluster without working RDMA should fail loudly, not move 0.6 GB per 32k
  prompt over sockets (add ``tcp`` to ``ucxTransports`` to allow it).
* ``UCX_RNDV_SCHEME=get_zcopy`` — the decode side *reads* the KV (NIXL READ); zero-copy
  GET keeps the bytes off bounce buffers.
* ``UCX_RNDV_THRESH`` — KV blocks are tens of KiB and up: past 8 KiB go rendezvous
  (zero-copy) instead of eager copies.

NCCL (tensor/expert parallel collectives): bootstrap over the pod interface
(``NCCL_SOCKET_IFNAME=eth0``), RDMA on every ``mlx5`` HCA the pod sees (``NCCL_IB_HCA`` is
a prefix match), and multi-node NVLink forced on where the pod holds an IMEX channel
(``NCCL_MNNVL_ENABLE=1``; NCCL's default only *tries* it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tandem.api.v1alpha1 import KvTransferSpec

Manifest = dict[str, Any]

DEFAULT_RDMA_RESOURCE = "rdma/ib"
GPU_UCX_TLS = ("rc", "cuda_copy", "cuda_ipc", "sm", "self")
UCX_RNDV_THRESH_BYTES = 8192
CPU_POD_INTERFACE = "eth0"


@dataclass(frozen=True, slots=True)
class RdmaOptions:
    """Operator-wide: how this cluster's nodes expose RDMA NICs to pods."""

    # Extended resource of the RDMA device plugin; None requests no RDMA device.
    resource: str | None = DEFAULT_RDMA_RESOURCE
    # One NIC per GPU (rail-optimized, e.g. SR-IOV or per-NIC resources) or a single
    # shared device (the RDMA shared device plugin).
    per_gpu: bool = True
    # UCX_NET_DEVICES / NCCL_IB_HCA value when the NIC names are known; "" leaves UCX to
    # choose among the NICs the pod was given.
    net_devices: str = ""


def render_rdma_resources(gpus: int, options: RdmaOptions) -> dict[str, str]:
    """The RDMA extended resource (requests == limits) for a worker with ``gpus`` GPUs."""
    if not options.resource or gpus <= 0:
        return {}
    return {options.resource: str(gpus if options.per_gpu else 1)}


def render_ucx_env(
    kv: KvTransferSpec, default_tls: tuple[str, ...], options: RdmaOptions, *, gpu: bool
) -> list[Manifest]:
    tls = ",".join(kv.ucx_transports) or ",".join(default_tls)
    env: list[Manifest] = []
    if tls:
        env.append({"name": "UCX_TLS", "value": tls})
    if not gpu:
        # CPU pods: TCP over the pod network. UCX would otherwise also offer the pod's own
        # loopback, which a peer in another pod must never be handed; kubelet always
        # names the pod's primary interface eth0.
        env.append({"name": "UCX_NET_DEVICES", "value": CPU_POD_INTERFACE})
        return env
    env += [
        {"name": "UCX_RNDV_SCHEME", "value": "get_zcopy"},
        {"name": "UCX_RNDV_THRESH", "value": str(UCX_RNDV_THRESH_BYTES)},
    ]
    if options.net_devices:
        env.append({"name": "UCX_NET_DEVICES", "value": options.net_devices})
    return env


def render_nccl_env(options: RdmaOptions, *, multi_node_nvlink: bool) -> list[Manifest]:
    env: list[Manifest] = [
        {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"},
        {"name": "NCCL_IB_HCA", "value": _hca_list(options)},
        {"name": "NCCL_DEBUG", "value": "WARN"},
    ]
    if multi_node_nvlink:
        env.append({"name": "NCCL_MNNVL_ENABLE", "value": "1"})
    return env


def _hca_list(options: RdmaOptions) -> str:
    """``mlx5_0:1,mlx5_1:1`` -> ``mlx5_0,mlx5_1`` (NCCL wants HCA names, ports optional)."""
    if not options.net_devices:
        return "mlx5"
    return ",".join(d.split(":")[0] for d in options.net_devices.split(","))
