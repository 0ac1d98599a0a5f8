"""Node profiles are pure: table tests over the rendered manifests."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from tandem.devcluster.nodes import (
    CPU_SERVER,
    GPU_RESOURCE,
    KWOK_ANNOTATION,
    LABEL_ARCH,
    LABEL_GPU_CLIQUE,
    LABEL_GPU_COUNT,
    LABEL_GPU_PRODUCT,
    LABEL_NVL72_DOMAIN,
    LABEL_RACK,
    PROFILES,
    RDMA_RESOURCE,
    NodeManifest,
    compute_clique_id,
    get_profile,
    render_gb200_tray,
    render_node,
    render_profile,
)
from tandem.devcluster.storage import render_model_volume


def _by_product(nodes: list[NodeManifest]) -> Counter[str]:
    return Counter(n["metadata"]["labels"].get(LABEL_GPU_PRODUCT, "cpu") for n in nodes)


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        (
            "default",
            {"NVIDIA-GB200": 8, "NVIDIA-B200": 2, "NVIDIA-H100-80GB-HBM3": 2, "cpu": 3},
        ),
        ("cpu", {"cpu": 3}),
        ("nvl72", {"NVIDIA-GB200": 36, "cpu": 2}),
    ],
)
def test_profile_node_counts(profile: str, expected: dict[str, int]) -> None:
    assert _by_product(render_profile(get_profile(profile))) == Counter(expected)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_node_is_kwok_managed_and_uniquely_named(profile: str) -> None:
    nodes = render_profile(get_profile(profile))
    names = [n["metadata"]["name"] for n in nodes]
    assert len(names) == len(set(names))
    for node in nodes:
        assert node["metadata"]["annotations"] == {KWOK_ANNOTATION: "fake"}
        assert node["metadata"]["labels"]["kubernetes.io/hostname"] == node["metadata"]["name"]


@pytest.mark.parametrize(
    ("name", "product", "gpus", "rdma", "arch"),
    [
        ("gb200-d0-t00", "NVIDIA-GB200", "4", "4", "arm64"),
        ("b200-0", "NVIDIA-B200", "8", "8", "amd64"),
        ("h100-1", "NVIDIA-H100-80GB-HBM3", "8", "8", "amd64"),
    ],
)
def test_gpu_nodes_advertise_gpus_rdma_labels_and_taint(
    name: str, product: str, gpus: str, rdma: str, arch: str
) -> None:
    nodes = {n["metadata"]["name"]: n for n in render_profile(get_profile("default"))}
    node = nodes[name]
    labels = node["metadata"]["labels"]
    for resources in (node["status"]["capacity"], node["status"]["allocatable"]):
        assert resources[GPU_RESOURCE] == gpus
        assert resources[RDMA_RESOURCE] == rdma
    assert labels[LABEL_GPU_PRODUCT] == product
    assert labels[LABEL_GPU_COUNT] == gpus
    assert labels["nvidia.com/gpu.present"] == "true"
    assert int(labels["nvidia.com/gpu.memory"]) > 0
    assert labels[LABEL_ARCH] == arch
    assert labels["node.kubernetes.io/instance-type"]
    assert node["spec"].get("taints") == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]


def test_cpu_nodes_have_no_gpu_and_no_taint() -> None:
    (node,) = [n for n in render_profile(get_profile("cpu")) if n["metadata"]["name"] == "cpu-0"]
    assert GPU_RESOURCE not in node["status"]["capacity"]
    assert "nvidia.com/gpu.present" not in node["metadata"]["labels"]
    assert "taints" not in node["spec"]


def test_allocatable_leaves_a_system_reserve() -> None:
    status = render_gb200_tray(0, 0)["status"]
    assert int(status["allocatable"]["cpu"]) < int(status["capacity"]["cpu"])
    assert status["allocatable"]["memory"] != status["capacity"]["memory"]
    assert status["allocatable"]["pods"] == status["capacity"]["pods"]


def test_gb200_trays_are_grouped_by_nvl72_domain() -> None:
    trays = [
        n
        for n in render_profile(get_profile("default"))
        if n["metadata"]["labels"].get(LABEL_GPU_PRODUCT) == "NVIDIA-GB200"
    ]
    domains = Counter(t["metadata"]["labels"][LABEL_NVL72_DOMAIN] for t in trays)
    assert domains == {"nvl72-0": 4, "nvl72-1": 4}
    for tray in trays:
        labels = tray["metadata"]["labels"]
        domain = int(labels[LABEL_NVL72_DOMAIN].removeprefix("nvl72-"))
        assert labels[LABEL_GPU_CLIQUE] == compute_clique_id(domain)
        assert labels[LABEL_RACK] == f"rack-{domain}"


def test_clique_ids_are_stable_and_distinct_per_domain() -> None:
    assert compute_clique_id(0) == compute_clique_id(0)
    assert compute_clique_id(0) != compute_clique_id(1)
    cluster_uuid, clique = compute_clique_id(3).rsplit(".", 1)
    assert len(cluster_uuid) == 36
    assert clique == "0"


def test_rendering_is_deterministic() -> None:
    assert render_profile(get_profile("default")) == render_profile(get_profile("default"))


def test_extra_labels_override_defaults() -> None:
    node = render_gb200_tray(1, 2)
    assert node["metadata"]["name"] == "gb200-d1-t02"
    plain = render_node("x", CPU_SERVER, extra_labels={"type": "custom"})
    assert plain["metadata"]["labels"]["type"] == "custom"


def test_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="known: cpu, default, nvl72"):
        get_profile("gb300")


def test_profiles_with_a_real_node_have_no_simulated_cpu_nodes() -> None:
    # A pod without a GPU toleration must land on the real node, never on a simulated one.
    real = [p for p in PROFILES.values() if p.real_node]
    assert [p.name for p in real] == ["real"]
    assert all(p.cpu == 0 for p in real)
    nodes = render_profile(get_profile("real"))
    assert nodes and all(n["spec"].get("taints") for n in nodes)


def test_the_simulated_model_volume_binds_the_documented_claim_on_kwok_nodes_only() -> None:
    repo = Path(__file__).resolve().parents[3]
    claim = yaml.safe_load((repo / "manifests" / "storage" / "models-pvc.yaml").read_text())
    volume = render_model_volume()["spec"]
    meta = claim["metadata"]
    assert volume["claimRef"] == {"namespace": meta["namespace"], "name": meta["name"]}
    assert set(claim["spec"]["accessModes"]) <= set(volume["accessModes"])
    assert "storageClassName" not in claim["spec"] and volume["storageClassName"] == ""
    (term,) = volume["nodeAffinity"]["required"]["nodeSelectorTerms"]
    (expr,) = term["matchExpressions"]
    # Every simulated node of every profile (the real node is not among them).
    for node in (n for profile in PROFILES.values() for n in render_profile(profile)):
        assert node["metadata"]["labels"][expr["key"]] in expr["values"]
