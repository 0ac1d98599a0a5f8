"""Accelerator profiles: GPU requests and placement that match real (and simulated) nodes."""

from __future__ import annotations

import pytest

from tandem.api.v1alpha1 import AcceleratorProfile, KvTransferSpec, PoolSpec
from tandem.devcluster import nodes as simulated
from tandem_operator.profiles import (
    GPU_RESOURCE,
    PROFILES,
    get_profile,
    gpus_per_worker,
    render_worker_hardware,
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
    assert hardware.resources == {"requests": {"cpu": "1", "memory": "1Gi"}}
    assert hardware.affinity is None
    assert hardware.tolerations == []
    assert hardware.env == [{"name": "UCX_TLS", "value": "tcp"}]


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
    assert hardware.env == [{"name": "UCX_TLS", "value": "rc,cuda_copy"}]


def test_every_profile_of_the_api_has_a_hardware_profile() -> None:
    assert set(PROFILES) == set(AcceleratorProfile)
