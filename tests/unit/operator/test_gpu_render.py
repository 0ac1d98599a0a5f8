"""GPU rendering per accelerator profile: pod specs (golden), engine options through the
ConfigMap, ComputeDomains, multi-node groups, and schema validation of everything."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from tandem.api.v1alpha1 import AcceleratorProfile, InferenceCluster, PoolRole
from tandem.api.validate import load_inference_cluster, parse_object
from tandem.engines.trtllm import TrtllmEngineOptions, render_trtllm_config
from tandem_operator import names
from tandem_operator.render.children import (
    PoolHandle,
    render_cluster_children,
    render_pool_children,
)
from tandem_operator.render.model_source import ModelSourceError, render_model_mount
from tandem_operator.render.multinode import SSH_PORT
from tandem_operator.render.placement import channel_template_name, compute_domain_name
from tandem_operator.render.pods import RenderSettings
from tandem_operator.render.profiles import HardwareOptions

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "manifests" / "examples"
COMPUTE_DOMAIN_CRD = REPO / "tests" / "e2e" / "nvidia_dra" / "computedomain-crd.yaml"
LWS_CRD = REPO / "tests/lws/bin/config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"
Manifest = dict[str, Any]

# profile -> (example, profile override): every GPU profile, rendered from a real example.
PROFILE_EXAMPLES: dict[str, tuple[str, str | None]] = {
    "gb200": ("gpt-oss-120b-gb200.yaml", None),
    "b200": ("gpt-oss-120b-b200.yaml", None),
    "h100": ("gpt-oss-20b-h100.yaml", None),
    "h200": ("gpt-oss-20b-h100.yaml", "h200"),
}


def load(example: str, profile: str | None = None, **spec: Any) -> InferenceCluster:
    doc = load_inference_cluster(EXAMPLES / example).to_wire()
    doc["metadata"]["uid"] = "ic-uid"
    if profile:
        doc["spec"]["accelerator"] = {"profile": profile}
    for key, value in spec.items():
        doc["spec"][key] = {**doc["spec"].get(key, {}), **value}
    parsed = parse_object(doc)
    assert isinstance(parsed, InferenceCluster)
    return parsed


def render_all(cr: InferenceCluster, settings: RenderSettings | None = None) -> list[Manifest]:
    settings = settings or RenderSettings()
    objects = render_cluster_children(cr, settings, include_pool_replicas=True)
    for role in PoolRole:
        handle = PoolHandle(names.pool_name(cr.metadata.name, role), f"{role.value}-uid", 2)
        objects += render_pool_children(cr, role, handle, settings)
    return objects


def find(objects: list[Manifest], kind: str, name: str) -> Manifest:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def pod_specs(cr: InferenceCluster) -> dict[str, Manifest]:
    objects = render_all(cr)
    return {
        role.value: find(objects, "Deployment", names.pool_name(cr.metadata.name, role))["spec"][
            "template"
        ]
        for role in PoolRole
    }


@pytest.mark.parametrize("profile", sorted(PROFILE_EXAMPLES))
def test_worker_pods_match_the_golden_file_per_profile(
    profile: str, assert_golden: Callable[[str, str], None]
) -> None:
    example, override = PROFILE_EXAMPLES[profile]
    templates = pod_specs(load(example, override))
    assert_golden(f"gpu-pods-{profile}.yaml", yaml.safe_dump(templates, sort_keys=False, width=100))


@pytest.mark.parametrize("profile", sorted(PROFILE_EXAMPLES))
def test_built_in_kinds_validate_against_kubernetes_1_36(profile: str) -> None:
    example, override = PROFILE_EXAMPLES[profile]
    checked = 0
    for obj in render_all(load(example, override)):
        if obj["kind"] in ("WorkerPool", "LeaderWorkerSet", "ComputeDomain"):
            continue
        kubernetes_validate.validate(obj, "1.36", strict=True)
        checked += 1
    assert checked >= 8


@pytest.mark.parametrize("profile", sorted(PROFILE_EXAMPLES))
def test_workers_get_the_pools_tensorrt_llm_options_through_the_config_map(profile: str) -> None:
    example, override = PROFILE_EXAMPLES[profile]
    cr = load(example, override)
    config_map = find(render_all(cr), "ConfigMap", names.config_map_name(cr.metadata.name))
    for role in PoolRole:
        document = json.loads(config_map["data"][names.config_key(role.value)])
        options = document["engine"]["options"]
        assert options["llm_args"] == render_trtllm_config(cr, role)
        # ... in exactly the shape the worker's trtllm engine reads.
        parsed = TrtllmEngineOptions.from_options(options)
        assert parsed.role is role
        assert parsed.model == render_model_mount(cr.spec.model).path


def test_moe_kernels_follow_the_gpu_generation() -> None:
    backends = {
        profile: render_trtllm_config(load(*PROFILE_EXAMPLES[profile]), PoolRole.DECODE)[
            "moe_config"
        ]["backend"]
        for profile in PROFILE_EXAMPLES
    }
    assert backends == {"gb200": "TRTLLM", "b200": "TRTLLM", "h100": "TRITON", "h200": "TRITON"}


def test_gb200_renders_a_compute_domain_matching_the_drivers_crd() -> None:
    cr = load("gpt-oss-120b-gb200.yaml")
    objects = render_all(cr)
    domain = find(objects, "ComputeDomain", compute_domain_name(cr.metadata.name))
    crd = yaml.safe_load(COMPUTE_DOMAIN_CRD.read_text())
    (version,) = crd["spec"]["versions"]
    assert (crd["spec"]["group"], version["name"]) == ("resource.nvidia.com", "v1beta1")
    jsonschema.validate(domain, version["schema"]["openAPIV3Schema"])
    assert domain["metadata"]["ownerReferences"][0]["kind"] == "InferenceCluster"
    template = channel_template_name(cr.metadata.name)
    assert domain["spec"]["channel"]["resourceClaimTemplate"]["name"] == template
    # Only the decode pool holds whole trays (TP4 = 4 GPUs): it alone claims the channel.
    decode = pod_specs(cr)["decode"]["spec"]
    assert decode["resourceClaims"] == [
        {"name": "compute-domain-channel", "resourceClaimTemplateName": template}
    ]
    assert decode["containers"][0]["resources"]["claims"] == [{"name": "compute-domain-channel"}]
    assert "resourceClaims" not in pod_specs(cr)["prefill"]["spec"]


def test_compute_domains_off_renders_none() -> None:
    settings = RenderSettings(hardware=HardwareOptions(compute_domains=False))
    objects = render_all(load("gpt-oss-120b-gb200.yaml"), settings)
    assert not [o for o in objects if o["kind"] == "ComputeDomain"]
    assert not [o for o in objects if "resourceClaims" in o.get("spec", {}).get("template", {})]


@pytest.mark.parametrize("profile", ["b200", "h100", "h200"])
def test_other_profiles_render_no_compute_domain(profile: str) -> None:
    example, override = PROFILE_EXAMPLES[profile]
    assert not [o for o in render_all(load(example, override)) if o["kind"] == "ComputeDomain"]


def test_gb200_workers_run_on_arm64_grace_hosts_with_the_same_image() -> None:
    gb200 = pod_specs(load("gpt-oss-120b-gb200.yaml"))["decode"]["spec"]
    b200 = pod_specs(load("gpt-oss-120b-b200.yaml"))["decode"]["spec"]
    (term,) = gb200["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]} in term[
        "matchExpressions"
    ]
    # One multi-platform image reference for both architectures.
    assert gb200["containers"][0]["image"] == b200["containers"][0]["image"]


def test_the_model_volume_is_mounted_where_the_engine_loads_it() -> None:
    spec = pod_specs(load("gpt-oss-20b-h100.yaml"))["prefill"]["spec"]
    assert {
        "name": "model",
        "persistentVolumeClaim": {"claimName": "models", "readOnly": True},
    } in spec["volumes"]
    assert {"name": "model", "mountPath": "/models", "readOnly": True} in spec["containers"][0][
        "volumeMounts"
    ]


@pytest.mark.parametrize(
    ("source", "path"),
    [
        ("pvc://models/gpt-oss-120b", "/models/gpt-oss-120b"),
        ("pvc://weights", "/models"),
        ("/opt/models/gpt-oss-20b", "/opt/models/gpt-oss-20b"),
        ("hf://openai/gpt-oss-20b", "openai/gpt-oss-20b"),
        (None, "openai/gpt-oss-20b"),
    ],
)
def test_model_sources_become_engine_paths(source: str | None, path: str) -> None:
    cr = load("gpt-oss-20b-h100.yaml", model={"source": source})
    assert render_model_mount(cr.spec.model).path == path


@pytest.mark.parametrize("source", ["s3://bucket/gpt-oss", "pvc:///x", "models/x"])
def test_unsupported_model_sources_are_refused(source: str) -> None:
    cr = load("gpt-oss-20b-h100.yaml", model={"source": source})
    with pytest.raises(ModelSourceError, match=r"model\.source"):
        render_model_mount(cr.spec.model)


# --------------------------------------------------------------------------- multi-node


def multi_node_cluster(launcher: str = "mpi") -> InferenceCluster:
    return load(
        "gpt-oss-120b-gb200.yaml",
        decode={
            "tensorParallelSize": 8,
            "gpusPerWorker": 4,
            "nodesPerWorker": 2,
            "launcher": launcher,
        },
    )


def test_multi_node_workers_match_the_golden_file(
    assert_golden: Callable[[str, str], None],
) -> None:
    cr = multi_node_cluster()
    lws = find(
        render_all(cr), "LeaderWorkerSet", names.pool_name(cr.metadata.name, PoolRole.DECODE)
    )
    assert_golden("gpu-lws-gb200-decode.yaml", yaml.safe_dump(lws, sort_keys=False, width=100))
    cr = multi_node_cluster("ray")
    lws = find(
        render_all(cr), "LeaderWorkerSet", names.pool_name(cr.metadata.name, PoolRole.DECODE)
    )
    assert_golden("gpu-lws-ray-gb200-decode.yaml", yaml.safe_dump(lws, sort_keys=False, width=100))


def test_ray_groups_start_the_engine_on_the_leader_and_join_followers_with_the_token() -> None:
    cr = multi_node_cluster("ray")
    lws = find(render_all(cr), "LeaderWorkerSet", "gpt-oss-120b-decode")
    group = lws["spec"]["leaderWorkerTemplate"]
    leader = group["leaderTemplate"]["spec"]["containers"][0]
    follower = group["workerTemplate"]["spec"]["containers"][0]
    separator = leader["command"].index("--")
    assert leader["command"][:separator] == ["python", "-m", "tandem.worker.ray_launch", "leader"]
    assert leader["command"][separator + 1 :][:3] == ["python", "-m", "tandem.worker"]
    assert leader["readinessProbe"]["httpGet"]["path"] == "/readyz"  # the router's target
    assert follower["command"] == ["python", "-m", "tandem.worker.ray_launch", "follower"]
    assert follower["ports"] == [{"name": "ray-node", "containerPort": 20001, "protocol": "TCP"}]
    assert follower["readinessProbe"]["tcpSocket"] == {"port": "ray-node"}
    assert "startupProbe" not in follower and "lifecycle" not in follower
    for template in (group["leaderTemplate"], group["workerTemplate"]):
        container = template["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["RAY_AUTH_TOKEN_PATH"] == "/etc/tandem/ray/token"
        assert "POD_IP" in env  # the address each node joins with
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        assert volumes["ray-token"]["secret"] == {
            "secretName": "gpt-oss-120b-ray-token",
            "items": [{"key": "token", "path": "token"}],
            "defaultMode": 0o400,
        }
        assert "mpi-ssh" not in volumes
    # TensorRT-LLM places its ranks through the group's Ray cluster; a one-node pool's
    # (prefill) and an MPI world's ranks do not.
    assert render_trtllm_config(cr, PoolRole.DECODE)["orchestrator_type"] == "ray"
    assert "orchestrator_type" not in render_trtllm_config(cr, PoolRole.PREFILL)
    assert "orchestrator_type" not in render_trtllm_config(multi_node_cluster(), PoolRole.DECODE)


def test_multi_node_leader_launches_one_mpi_world_and_followers_serve_ssh() -> None:
    cr = multi_node_cluster()
    lws = find(render_all(cr), "LeaderWorkerSet", "gpt-oss-120b-decode")
    group = lws["spec"]["leaderWorkerTemplate"]
    assert group["size"] == 2
    assert lws["spec"]["networkConfig"] == {"subdomainPolicy": "UniquePerReplica"}
    leader = group["leaderTemplate"]["spec"]["containers"][0]
    follower = group["workerTemplate"]["spec"]["containers"][0]
    assert leader["command"][:4] == ["python", "-m", "tandem.worker.mpi_launch", "leader"]
    launcher_args = leader["command"][: leader["command"].index("--")]
    assert launcher_args[launcher_args.index("--gpus-per-node") + 1] == "4"
    assert leader["command"][leader["command"].index("--") + 1 :][:3] == [
        "python",
        "-m",
        "tandem.worker",
    ]
    assert leader["readinessProbe"]["httpGet"]["path"] == "/readyz"  # the router's target
    assert follower["command"][3] == "follower"
    assert follower["readinessProbe"] == {
        "tcpSocket": {"port": "ssh"},
        "periodSeconds": 10,
        "failureThreshold": 3,
    }
    assert follower["ports"] == [{"name": "ssh", "containerPort": SSH_PORT, "protocol": "TCP"}]
    # The leader gets the private key only, followers the keys they accept only.
    for template, item in (
        (group["leaderTemplate"], "id_ed25519"),
        (group["workerTemplate"], "authorized_keys"),
    ):
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        assert volumes["mpi-ssh"]["secret"]["secretName"] == names.mpi_ssh_secret_name(
            "gpt-oss-120b"
        )
        assert volumes["mpi-ssh"]["secret"]["items"] == [{"key": item, "path": item}]
        # Every member of a TP group spanning trays needs the IMEX channel.
        assert template["spec"]["resourceClaims"][0]["name"] == "compute-domain-channel"
        assert template["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"


@pytest.mark.skipif(not LWS_CRD.exists(), reason="LWS CRD not built (make lws-build)")
def test_multi_node_workers_match_the_lws_crd_schema() -> None:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the CRD is 1.3 MB of YAML
    crd = yaml.load(LWS_CRD.read_text(), Loader=loader)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    for launcher in ("ray", "mpi"):
        lws = find(
            render_all(multi_node_cluster(launcher)), "LeaderWorkerSet", "gpt-oss-120b-decode"
        )
        jsonschema.validate(lws, version["schema"]["openAPIV3Schema"])
    # Both templates are plain pod templates: validate them as Kubernetes pods.
    for part in ("leaderTemplate", "workerTemplate"):
        template = lws["spec"]["leaderWorkerTemplate"][part]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, **template}
        pod["metadata"] = {"name": "p", **template["metadata"]}
        kubernetes_validate.validate(pod, "1.36", strict=True)


def test_a_tensor_parallel_reference_pool_runs_one_rank_per_pod_of_a_ray_group() -> None:
    cr = load(
        "reference-cpu.yaml",
        decode={"nodesPerWorker": 2, "tensorParallelSize": 2},
        prefill={"replicas": 0, "minReplicas": 0, "maxReplicas": 0},
    )
    children = render_all(cr)
    lws = find(children, "LeaderWorkerSet", names.pool_name(cr.metadata.name, PoolRole.DECODE))
    group = lws["spec"]["leaderWorkerTemplate"]
    assert group["size"] == 2
    leader = group["leaderTemplate"]["spec"]["containers"][0]
    assert leader["command"][:4] == ["python", "-m", "tandem.worker.ray_launch", "leader"]
    config_map = find(children, "ConfigMap", names.config_map_name(cr.metadata.name))
    decode = json.loads(config_map["data"][names.config_key("decode")])
    assert decode["engine"]["options"]["tensor_parallel_size"] == 2
    prefill = json.loads(config_map["data"][names.config_key("prefill")])
    assert "tensor_parallel_size" not in prefill["engine"]["options"]


def test_every_profile_example_is_covered() -> None:
    assert set(PROFILE_EXAMPLES) == {p.value for p in AcceleratorProfile} - {"cpu"}
