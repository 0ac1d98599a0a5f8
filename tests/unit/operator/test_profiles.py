"""Accelerator profiles: GPU requests and placement that match real (and simulated) nodes."""

from __future__ import annotations

import pytest

from tandem.api.v1alpha1 import AcceleratorProfile, KvTransferSpec, PoolSpec
from tandem.devcluster import nodes as simulated
from tandem_operator.render.fabric import RdmaOptions
from tandem_operator.render.profiles import (
    GPU_RESOURCE,
    LOOSE_SPREAD_MAX_SKEW,
    PROFILES,
    HardwareOptions,
    WorkerHardware,
    get_profile,
    gpus_per_worker,
    render_worker_hardware,
    whole_nodes,
)


@pytest.mark.parametrize(
    ("profile", "pool", "gpus"),
    [
        (AcceleratorProfile.CPU, PoolSpec(), 0),
        (AcceleratorProfile.CPU, PoolSpec(gpus_per_worker=2), 2),
        (AcceleratorProfile.H100, PoolSpec(), 1),
        (AcceleratorProfile.B200, PoolSpec(tensor_parallel_size=4), 4),
        (AcceleratorProfile.GB200, PoolSpec(tensor_parallel_size=8, nodes_per_worker=2), 4),
        (AcceleratorProfile.GB200, PoolSpec(tensor_parallel_size=3, nodes_per_worker=2), 2),
        (AcceleratorProfile.H200, PoolSpec(tensor_parallel_size=8, gpus_per_worker=8), 8),
    ],
)
def test_gpus_per_worker(profile: AcceleratorProfile, pool: PoolSpec, gpus: int) -> None:
    assert gpus_per_worker(get_profile(profile), pool) == gpus


@pytest.mark.parametrize(
    "machine", [simulated.GB200_TRAY, simulated.B200_SERVER, simulated.H100_SERVER]
)
def test_gpu_profiles_select_the_nodes_gpu_feature_discovery_labels(
    machine: simulated.MachineShape,
) -> None:
    assert machine.gpu is not None
    profile = PROFILES[AcceleratorProfile(machine.gpu.accelerator)]
    assert machine.gpu.product in profile.gpu_products
    assert profile.arch == machine.arch
    hardware = render_worker_hardware(profile.name, PoolSpec(), KvTransferSpec())
    (term,) = hardware.affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][  # type: ignore[index]
        "nodeSelectorTerms"
    ]
    node_labels = simulated.render_node("n", machine)["metadata"]["labels"]
    for expression in term["matchExpressions"]:
        assert node_labels[expression["key"]] in expression["values"]
    taint = simulated.render_node("n", machine)["spec"]["taints"][0]
    assert {"key": taint["key"], "operator": "Exists", "effect": taint["effect"]} in (
        hardware.tolerations
    )


def test_gpu_workers_request_whole_gpus_and_shared_memory() -> None:
    hardware = render_worker_hardware(
        AcceleratorProfile.B200, PoolSpec(tensor_parallel_size=2), KvTransferSpec()
    )
    assert hardware.resources["limits"][GPU_RESOURCE] == "2"
    assert hardware.resources["requests"][GPU_RESOURCE] == "2"
    assert {"name": "dshm", "mountPath": "/dev/shm"} in hardware.volume_mounts
    assert (hardware.max_surge, hardware.max_unavailable) == (0, 1)  # no spare GPUs assumed


def test_cpu_workers_get_default_requests_and_no_gpu_placement() -> None:
    hardware = render_worker_hardware(AcceleratorProfile.CPU, PoolSpec(), KvTransferSpec())
    assert hardware.resources == {"requests": {"cpu": "1", "memory": "1536Mi"}}
    assert hardware.affinity is None
    assert hardware.tolerations == []
    # KV over TCP on the pod network only (never the pod's own loopback).
    assert hardware.env == [
        {"name": "UCX_TLS", "value": "tcp"},
        {"name": "UCX_NET_DEVICES", "value": "eth0"},
    ]
    assert hardware.capabilities == ()
    assert hardware.resource_claims == []


def test_user_affinity_tolerations_and_transports_win() -> None:
    pool = PoolSpec.model_validate(
        {
            "affinity": {"nodeAffinity": {"x": 1}},
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            "nodeSelector": {"pool": "a"},
        }
    )
    hardware = render_worker_hardware(
        AcceleratorProfile.H100, pool, KvTransferSpec(ucx_transports=["rc", "cuda_copy"])
    )
    assert hardware.affinity == {"nodeAffinity": {"x": 1}}
    assert hardware.tolerations[-1] == {"key": "dedicated", "operator": "Exists"}
    assert hardware.node_selector == {"pool": "a"}
    assert hardware.env[0] == {"name": "UCX_TLS", "value": "rc,cuda_copy"}


def test_every_profile_of_the_api_has_a_hardware_profile() -> None:
    assert set(PROFILES) == set(AcceleratorProfile)


# --------------------------------------------------------------------------- GPU fabric

GPU_PROFILES = [
    AcceleratorProfile.GB200,
    AcceleratorProfile.B200,
    AcceleratorProfile.H200,
    AcceleratorProfile.H100,
]


def env_of(hardware: WorkerHardware) -> dict[str, str]:
    return {e["name"]: e["value"] for e in hardware.env}


@pytest.mark.parametrize("profile", GPU_PROFILES)
def test_gpu_workers_get_rdma_pinned_memory_and_a_tuned_transport(
    profile: AcceleratorProfile,
) -> None:
    pool = PoolSpec(tensor_parallel_size=2)
    hardware = render_worker_hardware(profile, pool, KvTransferSpec(), cluster="c")
    # One RDMA NIC per GPU (rail-optimized nodes), as extended resources must be.
    assert hardware.resources["requests"]["rdma/ib"] == "2"
    assert hardware.resources["limits"]["rdma/ib"] == "2"
    assert hardware.capabilities == ("IPC_LOCK",)
    env = env_of(hardware)
    assert env["UCX_TLS"] == "rc,cuda_copy,cuda_ipc,sm,self"  # no silent TCP fallback
    assert env["UCX_RNDV_SCHEME"] == "get_zcopy"
    assert env["NCCL_IB_HCA"] == "mlx5"
    assert "UCX_NET_DEVICES" not in env  # the device plugin decides which NICs the pod sees


def test_kv_transfer_transports_and_named_nics_override_the_defaults() -> None:
    options = HardwareOptions(rdma=RdmaOptions(net_devices="mlx5_0:1,mlx5_3:1"))
    hardware = render_worker_hardware(
        AcceleratorProfile.B200,
        PoolSpec(),
        KvTransferSpec(ucx_transports=["rc", "cuda_copy", "tcp"]),
        options=options,
    )
    env = env_of(hardware)
    assert env["UCX_TLS"] == "rc,cuda_copy,tcp"
    assert env["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_3:1"
    assert env["NCCL_IB_HCA"] == "mlx5_0,mlx5_3"


SHARED_RDMA = "rdma/rdma_shared_device_a"


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (RdmaOptions(resource=SHARED_RDMA, per_gpu=False), {SHARED_RDMA: "1"}),
        (RdmaOptions(resource=None), {}),
    ],
)
def test_rdma_resource_follows_the_clusters_device_plugin(
    options: RdmaOptions, expected: dict[str, str]
) -> None:
    hardware = render_worker_hardware(
        AcceleratorProfile.H100,
        PoolSpec(tensor_parallel_size=4),
        KvTransferSpec(),
        options=HardwareOptions(rdma=options),
    )
    limits = hardware.resources["limits"]
    assert {k: v for k, v in limits.items() if k != GPU_RESOURCE} == expected


def test_user_resources_win_over_rendered_extended_resources() -> None:
    pool = PoolSpec.model_validate({"resources": {"limits": {"rdma/ib": 8}}})
    hardware = render_worker_hardware(AcceleratorProfile.H100, pool, KvTransferSpec())
    assert hardware.resources["limits"]["rdma/ib"] == "8"


@pytest.mark.parametrize(
    ("pool", "whole", "claim"),
    [
        (PoolSpec(tensor_parallel_size=1), False, False),
        (PoolSpec(tensor_parallel_size=4), True, True),
        (PoolSpec(tensor_parallel_size=8, nodes_per_worker=2), True, True),
        (PoolSpec(tensor_parallel_size=2, gpus_per_worker=4), True, True),
    ],
)
def test_gb200_whole_tray_workers_join_the_compute_domain(
    pool: PoolSpec, whole: bool, claim: bool
) -> None:
    profile = get_profile(AcceleratorProfile.GB200)
    assert whole_nodes(profile, pool) is whole
    hardware = render_worker_hardware(AcceleratorProfile.GB200, pool, KvTransferSpec(), cluster="c")
    assert bool(hardware.resource_claims) is claim
    assert bool(hardware.container_claims) is claim
    assert ("NCCL_MNNVL_ENABLE" in env_of(hardware)) is claim
    if claim:
        assert hardware.resource_claims[0]["resourceClaimTemplateName"] == "c-nvlink-channel"
        assert hardware.container_claims[0]["name"] == hardware.resource_claims[0]["name"]
    # Placement follows the NVLink domain, not host spreading.
    assert hardware.spread_max_skew == LOOSE_SPREAD_MAX_SKEW
    terms = hardware.affinity["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]  # type: ignore[index]
    assert terms[0]["podAffinityTerm"]["topologyKey"] == "nvidia.com/gpu.clique"
    # Workers on part of a tray pack onto trays their pool already uses.
    assert (len(terms) == 2) is (not whole)


def test_compute_domains_can_be_turned_off_for_clusters_without_the_dra_driver() -> None:
    hardware = render_worker_hardware(
        AcceleratorProfile.GB200,
        PoolSpec(tensor_parallel_size=4),
        KvTransferSpec(),
        cluster="c",
        options=HardwareOptions(compute_domains=False),
    )
    assert hardware.resource_claims == []
    assert "podAffinity" in hardware.affinity  # type: ignore[operator]


@pytest.mark.parametrize("profile", [p for p in GPU_PROFILES if p is not AcceleratorProfile.GB200])
def test_profiles_without_nvlink_domains_spread_and_claim_nothing(
    profile: AcceleratorProfile,
) -> None:
    hardware = render_worker_hardware(
        profile, PoolSpec(tensor_parallel_size=8), KvTransferSpec(), cluster="c"
    )
    assert hardware.resource_claims == []
    assert hardware.spread_max_skew == 1
    assert "podAffinity" not in hardware.affinity  # type: ignore[operator]


@pytest.mark.parametrize(
    "machine", [simulated.GB200_TRAY, simulated.B200_SERVER, simulated.H100_SERVER]
)
def test_gpus_per_node_match_the_machines(machine: simulated.MachineShape) -> None:
    assert machine.gpu is not None
    profile = PROFILES[AcceleratorProfile(machine.gpu.accelerator)]
    assert profile.gpus_per_node == machine.gpus
    # The simulated NICs are what the RDMA request counts on: one per GPU.
    assert machine.rdma == machine.gpus
