"""Rendering: every child of an InferenceCluster, from the spec alone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from tandem.api.v1alpha1 import InferenceCluster, PoolRole
from tandem.api.validate import load_inference_cluster, parse_object
from tandem_operator import names
from tandem_operator.kube.diff import contains
from tandem_operator.render.children import (
    LWS_WORKER_INDEX_LABEL,
    PoolHandle,
    render_cluster_children,
    render_config_map,
    render_deletion_cost_patch,
    render_pool_children,
    render_worker_pool,
)
from tandem_operator.render.pods import RenderSettings

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "manifests" / "examples"
LWS_CRD = REPO / "tests/lws/bin/config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"
SETTINGS = RenderSettings()
Manifest = dict[str, Any]


def load(example: str, **spec_overrides: Any) -> InferenceCluster:
    cr = load_inference_cluster(EXAMPLES / example)
    doc = cr.to_wire()
    doc["metadata"] |= {"uid": "ic-uid", "namespace": cr.metadata.namespace or "serving"}
    for key, value in spec_overrides.items():
        doc["spec"][key] = {**doc["spec"].get(key, {}), **value}
    parsed = parse_object(doc)
    assert isinstance(parsed, InferenceCluster)
    return parsed


def render_all(cr: InferenceCluster, replicas: int = 2) -> list[Manifest]:
    objects = render_cluster_children(cr, SETTINGS, include_pool_replicas=True)
    for role in PoolRole:
        handle = PoolHandle(names.pool_name(cr.metadata.name, role), f"{role.value}-uid", replicas)
        objects += render_pool_children(cr, role, handle, SETTINGS)
    return objects


def by_kind_name(objects: list[Manifest]) -> dict[tuple[str, str], Manifest]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


EXAMPLE_FILES = ["reference-cpu.yaml", "gpt-oss-20b-h100.yaml", "gpt-oss-120b-gb200.yaml"]


@pytest.mark.parametrize("example", EXAMPLE_FILES)
def test_rendered_children_match_the_golden_files(
    example: str, assert_golden: Callable[[str, str], None]
) -> None:
    text = yaml.safe_dump_all(render_all(load(example)), sort_keys=False, width=100)
    assert_golden(f"render-{example}", text)


@pytest.mark.parametrize("example", EXAMPLE_FILES)
def test_builtin_kinds_pass_kubernetes_schema_validation(example: str) -> None:
    for obj in render_all(load(example)):
        if obj["kind"] in ("WorkerPool", "LeaderWorkerSet", "ComputeDomain"):
            continue
        kubernetes_validate.validate(obj, "1.36", strict=True)


@pytest.mark.parametrize("example", EXAMPLE_FILES)
def test_worker_pools_are_valid_api_objects(example: str) -> None:
    cr = load(example)
    for role in PoolRole:
        for include in (True, False):
            pool = parse_object(render_worker_pool(cr, role, include_replicas=include))
            assert pool.spec.role is role  # type: ignore[attr-defined]


def test_every_child_is_owned_and_labelled() -> None:
    cr = load("reference-cpu.yaml")
    for obj in render_all(cr):
        meta = obj["metadata"]
        assert meta["namespace"] == "serving"
        assert meta["labels"][names.LABEL_CLUSTER] == "reference"
        assert meta["labels"][names.LABEL_MANAGED_BY] == "tandem-operator"
        (owner,) = meta["ownerReferences"]
        assert owner["controller"] is True
        cluster_owned = ("WorkerPool", "ConfigMap", "NetworkPolicy")
        if obj["kind"] in cluster_owned or meta["name"].endswith("-frontend"):
            assert (owner["kind"], owner["uid"]) == ("InferenceCluster", "ic-uid")
        else:
            assert owner["kind"] == "WorkerPool"
            assert owner["name"] == meta["name"]


def test_names_are_deterministic() -> None:
    first = [(o["kind"], o["metadata"]["name"]) for o in render_all(load("reference-cpu.yaml"))]
    again = [(o["kind"], o["metadata"]["name"]) for o in render_all(load("reference-cpu.yaml"))]
    assert first == again
    assert ("Deployment", "reference-prefill") in first
    assert ("Deployment", "reference-frontend") in first
    assert ("ConfigMap", "reference-config") in first


def test_pool_replicas_come_from_the_live_pool() -> None:
    objects = by_kind_name(render_all(load("reference-cpu.yaml"), replicas=5))
    assert objects[("Deployment", "reference-decode")]["spec"]["replicas"] == 5


@pytest.mark.parametrize("autoscaling", [False, True])
def test_worker_pool_replicas_are_applied_only_when_asked(autoscaling: bool) -> None:
    cr = load("reference-cpu.yaml", decode={"replicas": 2})
    with_size = render_worker_pool(cr, PoolRole.DECODE, include_replicas=True)
    without = render_worker_pool(cr, PoolRole.DECODE, include_replicas=False)
    assert with_size["spec"]["replicas"] == 2
    assert "replicas" not in without["spec"]
    # Dropping the field must change the applied hash, or the drop would never be applied.
    hashes = {
        o["metadata"]["annotations"][names.ANNOTATION_APPLIED_HASH] for o in (with_size, without)
    }
    assert len(hashes) == 2


def config_hashes(cr: InferenceCluster) -> dict[str, str]:
    objects = by_kind_name(render_all(cr))
    return {
        name: objects[("Deployment", f"reference-{name}")]["spec"]["template"]["metadata"][
            "annotations"
        ][names.ANNOTATION_CONFIG_HASH]
        for name in ("frontend", "prefill", "decode")
    }


@pytest.mark.parametrize(
    ("change", "rolled"),
    [
        ({"decode": {"engineOptions": {"seed": 3}}}, {"decode"}),
        ({"prefill": {"tensorParallelSize": 1, "engineOptions": {"num_layers": 2}}}, {"prefill"}),
        ({"engine": {"options": {"seed": 9}}}, {"prefill", "decode"}),
        ({"frontend": {"routingPolicy": "round-robin"}}, {"frontend"}),
        ({"model": {"maxOutputTokens": 256}}, {"frontend", "prefill", "decode"}),
        ({"decode": {"replicas": 2}}, set()),  # resizing never rolls pods
        ({"autoscaling": {"enabled": True}}, set()),
    ],
)
def test_pods_roll_only_when_their_own_config_changes(change: Manifest, rolled: set[str]) -> None:
    before = config_hashes(load("reference-cpu.yaml"))
    after = config_hashes(load("reference-cpu.yaml", **change))
    assert {name for name in before if before[name] != after[name]} == rolled


def test_config_map_holds_one_document_per_component() -> None:
    config = render_config_map(load("reference-cpu.yaml"))
    assert sorted(config["data"]) == ["decode.json", "frontend.json", "prefill.json"]


def test_multi_node_pool_renders_a_leader_worker_set() -> None:
    cr = load("gpt-oss-120b-gb200.yaml", decode={"nodesPerWorker": 2})
    objects = by_kind_name(render_all(cr, replicas=3))
    assert ("Deployment", "gpt-oss-120b-decode") not in objects
    lws = objects[("LeaderWorkerSet", "gpt-oss-120b-decode")]
    assert lws["spec"]["replicas"] == 3
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    container = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    # The router talks to group leaders only.
    service = objects[("Service", "gpt-oss-120b-decode")]
    assert service["spec"]["selector"][LWS_WORKER_INDEX_LABEL] == "0"
    assert ("Deployment", "gpt-oss-120b-prefill") in objects


@pytest.mark.skipif(not LWS_CRD.exists(), reason="LWS CRD not built (make lws-build)")
def test_leader_worker_set_matches_the_lws_crd_schema() -> None:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the CRD is 1.3 MB of YAML
    crd = yaml.load(LWS_CRD.read_text(), Loader=loader)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = version["schema"]["openAPIV3Schema"]
    cr = load("gpt-oss-120b-gb200.yaml", decode={"nodesPerWorker": 2})
    lws = by_kind_name(render_all(cr))[("LeaderWorkerSet", "gpt-oss-120b-decode")]
    jsonschema.validate(lws, schema)
    _assert_known_fields(lws["spec"], schema["properties"]["spec"], "spec")


def _assert_known_fields(value: Any, schema: Manifest, path: str) -> None:
    """Structural schemas prune unknown fields silently; make that a test failure."""
    if isinstance(value, dict) and "properties" in schema:
        for key, sub in value.items():
            assert key in schema["properties"], f"{path}.{key} is not in the LWS schema"
            _assert_known_fields(sub, schema["properties"][key], f"{path}.{key}")


def test_user_pod_template_overrides_merge_over_the_rendered_pod() -> None:
    cr = load(
        "reference-cpu.yaml",
        decode={
            "env": [{"name": "EXTRA", "value": "1"}],
            "podTemplate": {
                "labels": {"team": "ml", names.LABEL_ROLE: "hijack"},
                "annotations": {"note": "x"},
                "spec": {
                    "priorityClassName": "inference",
                    "containers": [{"name": "worker", "args": ["--verbose"]}],
                },
            },
        },
    )
    template = by_kind_name(render_all(cr))[("Deployment", "reference-decode")]["spec"]["template"]
    assert template["metadata"]["labels"]["team"] == "ml"
    assert template["metadata"]["labels"][names.LABEL_ROLE] == "decode"  # selector label wins
    assert template["metadata"]["annotations"]["note"] == "x"
    spec = template["spec"]
    assert spec["priorityClassName"] == "inference"
    (container,) = spec["containers"]
    assert container["args"] == ["--verbose"]
    assert container["command"][:3] == ["python", "-m", "tandem.worker"]  # merged, not replaced
    assert {"name": "EXTRA", "value": "1"} in container["env"]


def test_rendering_is_a_sub_tree_of_itself_after_a_server_round_trip() -> None:
    # What the controller relies on to skip applies: a rendered object "contains" itself.
    for obj in render_all(load("gpt-oss-20b-h100.yaml")):
        assert contains(obj, obj)


def test_deletion_cost_patch_targets_the_pod_annotation() -> None:
    patch = render_deletion_cost_patch(-5)
    assert patch == {"metadata": {"annotations": {names.ANNOTATION_DELETION_COST: "-5"}}}


def test_only_the_frontend_can_call_the_api_and_only_to_watch_endpointslices() -> None:
    objects = by_kind_name(render_all(load("reference-cpu.yaml")))
    name = "reference-frontend"
    account = objects[("ServiceAccount", name)]
    role = objects[("Role", name)]
    binding = objects[("RoleBinding", name)]
    assert account["automountServiceAccountToken"] is False  # only where a pod asks for it
    assert role["rules"] == [
        {
            "apiGroups": ["discovery.k8s.io"],
            "resources": ["endpointslices"],
            "verbs": ["list", "watch"],
        }
    ]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "serving"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": name,
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": "serving"}]
    for obj in (account, role, binding):
        assert obj["metadata"]["ownerReferences"][0]["kind"] == "InferenceCluster"
    frontend = objects[("Deployment", name)]["spec"]["template"]["spec"]
    assert frontend["serviceAccountName"] == name
    assert frontend["automountServiceAccountToken"] is True
    for role_name in ("reference-prefill", "reference-decode"):
        worker = objects[("Deployment", role_name)]["spec"]["template"]["spec"]
        assert worker["automountServiceAccountToken"] is False
        assert "serviceAccountName" not in worker
