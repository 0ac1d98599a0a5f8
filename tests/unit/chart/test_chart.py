"""The Helm chart: lint, render, validate against Kubernetes schemas, strict values."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "tandem"
HELM = Path(sys.executable).parent / "helm"
KUBE_VERSION = "1.36"

pytestmark = pytest.mark.skipif(not HELM.exists(), reason="helm not installed in the venv")


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(HELM), *args], capture_output=True, text=True, timeout=60, check=False
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def render(
    *sets: str,
    release: str = "tandem",
    namespace: str = "tandem-system",
    values: tuple[Path, ...] = (),
) -> list[Any]:
    argv = ["template", release, str(CHART), "--namespace", namespace, "--kube-version", "1.36.0"]
    for path in values:
        argv += ["--values", str(path)]
    for value in sets:
        argv += ["--set", value]
    return [d for d in yaml.safe_load_all(helm(*argv).stdout) if d]


def by_kind(docs: list[Any]) -> dict[str, Any]:
    return {d["kind"]: d for d in docs}


def test_helm_lint_passes() -> None:
    result = helm("lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in result.stdout


def test_default_render_matches_the_golden_file(assert_golden: Callable[[str, str], None]) -> None:
    assert_golden("default.yaml", yaml.safe_dump_all(render(), sort_keys=False, width=100))


@pytest.mark.parametrize(
    "sets",
    [
        (),
        ("replicaCount=1", "operator.watchNamespaces={serving}", "rbac.create=false"),
        (
            "serviceAccount.create=false",
            "serviceAccount.name=custom",
            "metrics.service.enabled=false",
        ),
    ],
)
def test_rendered_manifests_pass_kubernetes_validation(sets: tuple[str, ...]) -> None:
    for doc in render(*sets):
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_crds_are_the_generated_ones() -> None:
    for crd in sorted((CHART / "crds").glob("*.yaml")):
        assert crd.read_text() == (REPO / "manifests" / "crds" / crd.name).read_text()


def test_operator_runs_hardened_with_two_replicas() -> None:
    docs = by_kind(render())
    deployment = docs["Deployment"]
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["resources"]["limits"]["memory"]
    assert container["command"] == ["tandem"]
    assert container["args"][:2] == ["operator", "run"]
    assert "--leader-election-namespace=$(POD_NAMESPACE)" in container["args"]
    assert "--image=ghcr.io/tandem-dev/tandem:0.1.0" in container["args"]
    assert docs["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1


def test_selector_labels_are_a_stable_subset_of_the_labels() -> None:
    deployment = by_kind(render())["Deployment"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    labels = deployment["metadata"]["labels"]
    assert selector.items() <= labels.items()
    assert not any(k in selector for k in ("helm.sh/chart", "app.kubernetes.io/version"))
    for doc in render():
        assert doc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"


def test_rbac_is_least_privilege() -> None:
    docs = by_kind(render())
    rules = docs["ClusterRole"]["rules"]
    verbs = {
        (group, resource): set(rule["verbs"])
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert all("*" not in v for v in verbs.values())
    assert all("*" not in rule["resources"] for rule in rules)
    # The operator never changes what users own: clusters are only read.
    assert verbs[("tandem.dev", "inferenceclusters")] == {"list", "watch"}
    # Pods are patched only for the autoscaler's pod-deletion-cost annotation.
    assert verbs[("", "pods")] == {"list", "watch", "patch"}
    assert verbs[("tandem.dev", "workerpools/scale")] == {"patch"}
    # Secrets: each cluster's credentials and MPI SSH keys, made and rotated by the
    # operator; never deleted (garbage collection follows the owner); read by name only
    # to adopt a hand-made MPI key Secret (list reads every Secret already).
    assert verbs[("", "secrets")] == {"get", "list", "watch", "create", "patch"}
    assert verbs[("networking.k8s.io", "networkpolicies")] == {"list", "watch", "create", "patch"}
    # Profiling Jobs: never read by name (an informer caches them), never updated.
    assert verbs[("batch", "jobs")] == {"list", "watch", "create", "patch", "delete"}
    # Held only so that it can grant frontends exactly this (RBAC escalation rules).
    assert verbs[("discovery.k8s.io", "endpointslices")] == {"list", "watch"}
    # Leases: only in its own namespace (a Role), only its own Lease beyond create.
    role = docs["Role"]
    assert role["metadata"]["namespace"] == "tandem-system"
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["tandem-operator"],
            "verbs": ["get", "update"],
        }
    ]
    subject = docs["ClusterRoleBinding"]["subjects"][0]
    assert subject == {"kind": "ServiceAccount", "name": "tandem", "namespace": "tandem-system"}


def test_notes_explain_port_forward_and_curl() -> None:
    notes = helm("install", "tandem", str(CHART), "--dry-run=client", "-n", "x").stdout
    assert "kubectl port-forward svc/reference-frontend 8000:8000" in notes
    assert "curl http://127.0.0.1:8000/v1/chat/completions" in notes
    # The frontend requires a key in a cluster: the notes make one and send it.
    assert "export OPENAI_API_KEY=$(tandem keys add reference --tenant me)" in notes
    assert '-H "Authorization: Bearer $OPENAI_API_KEY"' in notes
    assert notes.index("tandem keys add") < notes.index("curl http://127.0.0.1:8000/v1/")
    # helm upgrade leaves crds/ alone: the notes say to apply the release's CRDs first.
    assert notes.index("tandem crds apply") < notes.index("helm upgrade tandem <chart> -n x")
    single = helm("install", "t", str(CHART), "--dry-run=client", "--set", "replicaCount=1").stdout
    assert "WARNING: replicaCount is 1" in single


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("replicaCont=2", "additional properties 'replicaCont' not allowed"),
        ("image.tagg=x", "additional properties 'tagg' not allowed"),
        ("operator.workers=0", "minimum"),
        ("operator.logLevel=loud", "operator/logLevel"),
        ("metrics.serviceMonitor.interval=often", "interval"),
        ("operator.credentialPropagationSeconds=1", "credentialPropagationSeconds"),
        ("operator.planTimeoutSeconds=1", "planTimeoutSeconds"),
        ("metrics.networkPolicy.from[0].podSelektor.x=y", "podSelektor"),
        ("dataPlane.trtllmImageByProfile.a100=r/t:1", "additional properties 'a100' not allowed"),
        ("dataPlane.imagePullSecrets[0].nmae=regcred", "nmae"),
        ("fabric.computeDomains=maybe", "computeDomains"),
        ("fabric.rdma.resource=rdma ib", "resource"),
        ("fabric.rdma.netDevices=mlx5_0 mlx5_1", "netDevices"),
        ("dataPlane.frontendResources.request.cpu=1", "additional properties 'request'"),
    ],
)
def test_schema_rejects_typos_and_bad_values(value: str, complaint: str) -> None:
    result = helm("template", "t", str(CHART), "--set", value, check=False)
    assert result.returncode != 0
    assert complaint in result.stderr


def test_watched_namespaces_get_roles_and_the_cluster_role_keeps_only_nodes() -> None:
    docs = render("operator.watchNamespaces={serving,batch}")
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
    args = by_kind(docs)["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=serving,batch" in args
    cluster_role = by_kind(docs)["ClusterRole"]
    assert [r["resources"] for r in cluster_role["rules"]] == [["nodes"]]
    assert {v for r in cluster_role["rules"] for v in r["verbs"]} == {"list", "watch"}
    roles = {
        d["metadata"]["namespace"]: d
        for d in docs
        if d["kind"] == "Role" and d["metadata"]["name"].endswith("-operator")
    }
    assert set(roles) == {"serving", "batch"}
    bindings = {
        d["metadata"]["namespace"]
        for d in docs
        if d["kind"] == "RoleBinding" and d["roleRef"]["name"].endswith("-operator")
    }
    assert bindings == {"serving", "batch"}
    for role in roles.values():
        secrets = [r for r in role["rules"] if "secrets" in r["resources"]]
        assert secrets and secrets[0]["verbs"] == ["get", "list", "watch", "create", "patch"]
    # Every namespace: the same rules, cluster-wide, and no Roles.
    everywhere = render()
    rules = by_kind(everywhere)["ClusterRole"]["rules"]
    assert rules[0]["resources"] == ["nodes"]
    assert rules[1:] == roles["serving"]["rules"]
    assert not [
        d
        for d in everywhere
        if d["kind"] == "Role" and d["metadata"]["name"].rsplit("-", 1)[-1] == "operator"
    ]


def test_the_operators_metrics_port_admits_only_what_values_allow() -> None:
    policy = by_kind(render())["NetworkPolicy"]
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
        "operator"
    )
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == []  # the node's probes only
    monitoring = "metrics.networkPolicy.from[0].namespaceSelector.matchLabels.team=monitoring"
    (rule,) = by_kind(render(monitoring))["NetworkPolicy"]["spec"]["ingress"]
    assert rule == {
        "from": [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}],
        "ports": [{"protocol": "TCP", "port": 8080}],
    }
    assert "NetworkPolicy" not in by_kind(render("metrics.networkPolicy.enabled=false"))


def test_worker_metrics_peers_reach_the_operators_rendering() -> None:
    from tandem.cli import operator as operator_cli
    from tandem.cli.main import build_parser

    peer = "dataPlane.workerMetricsFrom[0].namespaceSelector.matchLabels.team=monitoring"
    args = [a.replace("$(POD_NAMESPACE)", "x") for a in operator_container(peer)["args"]]
    settings = operator_cli.render_settings(build_parser().parse_args(args))
    assert settings.worker_metrics_from == (
        {"namespaceSelector": {"matchLabels": {"team": "monitoring"}}},
    )
    assert not any(a.startswith("--worker-metrics-from") for a in operator_container()["args"])


def test_service_monitor_is_opt_in() -> None:
    assert "ServiceMonitor" not in by_kind(render())
    assert "ServiceMonitor" in by_kind(render("metrics.serviceMonitor.enabled=true"))


# --------------------------------------------------------------------------- schema


def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return loaded


def object_nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if node.get("type") == "object":
        yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from object_nodes(sub, f"{path}.{name}")
    for name, sub in node.get("definitions", {}).items():
        yield from object_nodes(sub, f"#{name}")
    if isinstance(node.get("items"), dict):
        yield from object_nodes(node["items"], f"{path}[]")


def test_every_object_in_the_schema_is_closed() -> None:
    for path, node in object_nodes(schema()):
        extra = node.get("additionalProperties")
        # Closed; or a map whose values are typed (labels, annotations, quantities); or a
        # Kubernetes type passed through whole, which the API server validates at install.
        typed_map = isinstance(extra, dict) and "type" in extra
        passthrough = extra is True and "API server validates" in node.get("description", "")
        assert extra is False or typed_map or passthrough, path or "<root>"


def resolve(node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref:
        resolved: dict[str, Any] = schema()["definitions"][ref.rsplit("/", 1)[-1]]
        return resolved
    return node


def leaf_paths(values: Any, node: dict[str, Any], path: str = "") -> Iterator[str]:
    node = resolve(node)
    if isinstance(values, dict) and "properties" in node:
        for key, sub in values.items():
            assert key in node["properties"], f"values.yaml key {path}.{key} is not in the schema"
            yield from leaf_paths(sub, node["properties"][key], f"{path}.{key}" if path else key)
    else:
        yield path


def test_values_yaml_matches_the_schema_and_every_key_is_documented() -> None:
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    import jsonschema

    jsonschema.validate(values, schema())
    comments = set(re.findall(r"#\s*([A-Za-z][\w.]*) --", text))
    for path in leaf_paths(values, schema()):
        top = path.split(".")[0]
        assert path in comments or top in comments, f"{path} has no '# {path} --' comment"


# --------------------------------------------------------------------------- images

LOCAL_IMAGES = (
    "image.repository=tandem.local/tandem",
    "image.tag=dev",
    "image.pullPolicy=Never",
    "dataPlane.pullPolicy=Never",
)


def operator_container(*sets: str, values: tuple[Path, ...] = ()) -> dict[str, Any]:
    deployment = by_kind(render(*sets, values=values))["Deployment"]
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def test_local_images_reach_the_operator_and_the_pods_it_renders(
    rendered_containers: Callable[[str, Any], list[dict[str, Any]]],
) -> None:
    """values -> the operator's flags -> its RenderSettings -> every rendered container."""
    from tandem.cli import operator as operator_cli
    from tandem.cli.main import build_parser

    container = operator_container(*LOCAL_IMAGES)
    local = ("tandem.local/tandem:dev", "Never")
    assert (container["image"], container["imagePullPolicy"]) == local
    args = [a.replace("$(POD_NAMESPACE)", "tandem-system") for a in container["args"]]
    parsed = build_parser().parse_args(args)
    settings = operator_cli.render_settings(parsed)
    pods = rendered_containers("reference-cpu.yaml", settings)
    assert {(c["image"], c["imagePullPolicy"]) for c in pods} == {local}


def test_the_data_plane_image_can_differ_from_the_operators() -> None:
    args = operator_container(
        "image.tag=1.0", "dataPlane.image.repository=r.example/dp", "dataPlane.image.tag=2.0"
    )["args"]
    assert "--image=r.example/dp:2.0" in args
    assert "--image-pull-policy=IfNotPresent" in args
    tag_only = operator_container("image.tag=1.0")["args"]
    assert "--image=ghcr.io/tandem-dev/tandem:1.0" in tag_only
    assert "--trtllm-image=ghcr.io/tandem-dev/tandem-trtllm:0.1.0" in tag_only


@pytest.mark.parametrize("key", ["image.pullPolicy", "dataPlane.pullPolicy"])
def test_schema_refuses_an_unknown_pull_policy(key: str) -> None:
    result = helm("template", "t", str(CHART), "--set", f"{key}=Nevr", check=False)
    assert result.returncode != 0
    assert "pullPolicy" in result.stderr


# --------------------------------------------------------------------------- GPU values

GPU_VALUES = CHART / "values-gpu.yaml"


def operator_settings(*sets: str, values: tuple[Path, ...] = ()) -> Any:
    """values -> the chart's operator flags -> the operator's RenderSettings."""
    from tandem.cli import operator as operator_cli
    from tandem.cli.main import build_parser

    container = operator_container(*sets, values=values)
    args = [a.replace("$(POD_NAMESPACE)", "tandem-system") for a in container["args"]]
    return operator_cli.render_settings(build_parser().parse_args(args))


def merged(base: Any, override: Any) -> Any:
    """Helm's merge of a values file over the chart's defaults."""
    if not (isinstance(base, dict) and isinstance(override, dict)):
        return override
    return {k: merged(base[k], v) if k in base else v for k, v in {**base, **override}.items()}


def test_the_gpu_values_file_is_valid_and_renders() -> None:
    import jsonschema

    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.validate(merged(defaults, yaml.safe_load(GPU_VALUES.read_text())), schema())
    for doc in render(values=(GPU_VALUES,)):
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_gpu_values_reach_every_pod_the_operator_renders(
    rendered_pod_specs: Callable[[str, Any], list[dict[str, Any]]],
) -> None:
    """Pull secrets, images per profile, frontend resources and the fabric, set through
    values alone, in the GB200 example's pods."""
    arm = "r.example/tandem-trtllm:1-arm64"
    per_profile = f"dataPlane.trtllmImageByProfile.gb200={arm}"
    secret = "dataPlane.imagePullSecrets[0].name=regcred"
    settings = operator_settings(per_profile, secret, values=(GPU_VALUES,))
    specs = rendered_pod_specs("gpt-oss-120b-gb200.yaml", settings)
    assert [s["imagePullSecrets"] for s in specs] == [[{"name": "regcred"}]] * len(specs)
    images = {c["name"]: c["image"] for s in specs for c in s["containers"]}
    assert images["worker"] == arm
    assert images["frontend"] == "ghcr.io/tandem-dev/tandem:0.1.0"
    (frontend,) = [c for s in specs for c in s["containers"] if c["name"] == "frontend"]
    assert frontend["resources"] == {
        "requests": {"cpu": "2", "memory": "2Gi"},
        "limits": {"memory": "4Gi"},
    }
    workers = [c for s in specs for c in s["containers"] if c["name"] == "worker"]
    assert {c["resources"]["limits"]["rdma/ib"] for c in workers} == {"1", "4"}  # per GPU
    assert any("resourceClaims" in s for s in specs)  # decode: whole trays, one domain

    # A node set without NVIDIA's DRA driver and with the RDMA shared device plugin.
    shared = operator_settings(
        "fabric.computeDomains=false",
        "fabric.rdma.resource=rdma/rdma_shared_device_a",
        "fabric.rdma.shared=true",
        "fabric.rdma.netDevices=mlx5_0:1",
        values=(GPU_VALUES,),
    )
    specs = rendered_pod_specs("gpt-oss-120b-gb200.yaml", shared)
    assert not any("resourceClaims" in s for s in specs)
    workers = [c for s in specs for c in s["containers"] if c["name"] == "worker"]
    for container in workers:
        assert container["resources"]["limits"]["rdma/rdma_shared_device_a"] == "1"
        assert "rdma/ib" not in container["resources"]["limits"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert (env["UCX_NET_DEVICES"], env["NCCL_IB_HCA"]) == ("mlx5_0:1", "mlx5_0")
        assert "NCCL_MNNVL_ENABLE" not in env
    # Another profile keeps the operator-wide TensorRT-LLM image.
    b200 = rendered_pod_specs("gpt-oss-120b-b200.yaml", settings)
    assert {c["image"] for s in b200 for c in s["containers"] if c["name"] == "worker"} == {
        "ghcr.io/tandem-dev/tandem-trtllm:0.1.0"
    }


@pytest.mark.parametrize("values", [(), (GPU_VALUES,)])
def test_without_pull_secrets_the_pods_get_none_and_the_fabric_is_the_default(
    rendered_pod_specs: Callable[[str, Any], list[dict[str, Any]]], values: tuple[Path, ...]
) -> None:
    specs = rendered_pod_specs("gpt-oss-120b-gb200.yaml", operator_settings(values=values))
    assert not any("imagePullSecrets" in s for s in specs)
    assert any("resourceClaims" in s for s in specs)
    args = operator_container(values=values)["args"]
    assert "--compute-domains" in args and "--rdma-resource=rdma/ib" in args
    assert not any(a.startswith(("--rdma-shared", "--image-pull-secret")) for a in args)
