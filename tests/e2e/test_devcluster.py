"""The dev cluster behaves like a GPU cluster to kubectl: nodes with GPU capacity, the real
scheduler placing (or refusing) GPU pods, garbage collection, and CRD validation with CEL.

Pods never run containers: kwok marks bound pods Running. Their IPs are fake; never dial
them.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from tandem.devcluster import DevCluster, get_profile, render_profile
from tandem.devcluster.binaries import ClusterBinaries
from tandem.devcluster.components import NOT_READY_LABEL, NOT_READY_VALUE
from tandem.devcluster.probes import wait_until

pytestmark = [pytest.mark.k8s, pytest.mark.parallel]

IMAGE = "registry.k8s.io/pause:3.10"  # never pulled: kwok runs no containers
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
GB200_SELECTOR = {"nvidia.com/gpu.product": "NVIDIA-GB200"}
WAIT_S = 60.0


def _get_json(cluster: DevCluster, *args: str) -> dict[str, object]:
    result: dict[str, object] = json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)
    return result


def _items(cluster: DevCluster, *args: str) -> list[dict[str, object]]:
    items = _get_json(cluster, *args)["items"]
    assert isinstance(items, list)
    return items


def _apply(cluster: DevCluster, manifest: Mapping[str, object], *args: str) -> None:
    cluster.kubectl("apply", "-f", "-", *args, input=json.dumps(manifest))


def _deployment(
    name: str, *, gpus: int, replicas: int, node_selector: dict[str, str] | None = None
) -> dict[str, object]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    pod_spec: dict[str, object] = {
        "containers": [{"name": "main", "image": IMAGE, "resources": resources}],
        "tolerations": [GPU_TOLERATION] if gpus else [],
        "terminationGracePeriodSeconds": 1,
    }
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
        },
    }


@pytest.fixture
def namespace(k8s_cluster: DevCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace whose default ServiceAccount exists (pods are refused before)."""
    base = request.node.name.removeprefix("test_").replace("_", "-")[:40].strip("-")
    name = f"{base}-{secrets.token_hex(3)}"
    k8s_cluster.kubectl("create", "namespace", name)
    k8s_cluster.kubectl(
        "wait", "--for=create", "serviceaccount/default", "-n", name, f"--timeout={WAIT_S:.0f}s"
    )
    yield name
    k8s_cluster.kubectl("delete", "namespace", name, "--wait=false")


def test_get_nodes_lists_simulated_nodes_with_gpu_capacity(k8s_cluster: DevCluster) -> None:
    columns = (
        "NAME:.metadata.name,GPU:.status.capacity.nvidia\\.com/gpu,"
        "RDMA:.status.allocatable.rdma/ib,PRODUCT:.metadata.labels.nvidia\\.com/gpu\\.product"
    )
    out = k8s_cluster.kubectl("get", "nodes", "-o", f"custom-columns={columns}").stdout
    rows = {fields[0]: fields[1:] for fields in (line.split() for line in out.splitlines()[1:])}
    expected = {
        n["metadata"]["name"]: [
            n["status"]["capacity"].get("nvidia.com/gpu", "<none>"),
            n["status"]["allocatable"].get("rdma/ib", "<none>"),
            n["metadata"]["labels"].get("nvidia.com/gpu.product", "<none>"),
        ]
        for n in render_profile(get_profile("default"))
    }
    assert rows == expected
    assert rows["gb200-d0-t00"] == ["4", "4", "NVIDIA-GB200"]
    assert rows["b200-0"][0] == "8"

    plain = k8s_cluster.kubectl("get", "nodes", "--no-headers").stdout.splitlines()
    assert len(plain) == len(expected)
    assert all(line.split()[1] == "Ready" for line in plain), plain


def test_gb200_deployment_is_scheduled_onto_trays_and_running(
    k8s_cluster: DevCluster, namespace: str
) -> None:
    _apply(
        k8s_cluster,
        _deployment("gb200-worker", gpus=4, replicas=3, node_selector=GB200_SELECTOR),
        "-n",
        namespace,
    )
    k8s_cluster.kubectl(
        "rollout", "status", "deployment/gb200-worker", "-n", namespace, f"--timeout={WAIT_S:.0f}s"
    )
    pods = _items(k8s_cluster, "pods", "-n", namespace, "-l", "app=gb200-worker")
    assert len(pods) == 3
    nodes = []
    for pod in pods:
        spec, status = pod["spec"], pod["status"]
        assert isinstance(spec, dict) and isinstance(status, dict)
        assert status["phase"] == "Running"
        nodes.append(spec["nodeName"])
    # A tray has exactly 4 GPUs, so three 4-GPU pods need three different trays.
    assert len(set(nodes)) == 3, nodes
    for node in nodes:
        labels = _get_json(k8s_cluster, "node", node)["metadata"]
        assert isinstance(labels, dict)
        assert labels["labels"]["nvidia.com/gpu.product"] == "NVIDIA-GB200"
        assert labels["labels"]["tandem.dev/nvl72-domain"].startswith("nvl72-")


def test_more_gpus_than_any_node_has_stays_pending_with_the_scheduler_reason(
    k8s_cluster: DevCluster, namespace: str
) -> None:
    _apply(k8s_cluster, _deployment("too-big", gpus=16, replicas=1), "-n", namespace)

    def failed_scheduling_messages() -> list[str]:
        events = _items(
            k8s_cluster, "events", "-n", namespace, "--field-selector", "reason=FailedScheduling"
        )
        return [str(e.get("message", "")) for e in events]

    wait_until(
        lambda: any("Insufficient nvidia.com/gpu" in m for m in failed_scheduling_messages()),
        timeout_s=WAIT_S,
        what="a FailedScheduling event naming nvidia.com/gpu",
    )
    (pod,) = _items(k8s_cluster, "pods", "-n", namespace, "-l", "app=too-big")
    spec, status = pod["spec"], pod["status"]
    assert isinstance(spec, dict) and isinstance(status, dict)
    assert status["phase"] == "Pending"
    assert "nodeName" not in spec
    (scheduled,) = [c for c in status["conditions"] if c["type"] == "PodScheduled"]
    assert scheduled["status"] == "False"
    assert scheduled["reason"] == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in scheduled["message"]


def test_deleting_a_deployment_garbage_collects_its_pods(
    k8s_cluster: DevCluster, namespace: str
) -> None:
    _apply(k8s_cluster, _deployment("cpu-app", gpus=0, replicas=2), "-n", namespace)
    k8s_cluster.kubectl(
        "rollout", "status", "deployment/cpu-app", "-n", namespace, f"--timeout={WAIT_S:.0f}s"
    )
    pods = _items(k8s_cluster, "pods", "-n", namespace, "-l", "app=cpu-app")
    assert len(pods) == 2
    # Untainted CPU nodes are the only ones a pod without the GPU toleration may use.
    assert all(str(p["spec"]["nodeName"]).startswith("cpu-") for p in pods)  # type: ignore[index]

    k8s_cluster.kubectl("delete", "deployment", "cpu-app", "-n", namespace, "--wait=false")

    def leftovers() -> str:
        return k8s_cluster.kubectl(
            "get", "replicasets,pods", "-n", namespace, "-l", "app=cpu-app", "-o", "name"
        ).stdout.strip()

    wait_until(lambda: leftovers() == "", timeout_s=WAIT_S, what="ReplicaSet and pods GC'd")


WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.e2e.tandem.dev"},
    "spec": {
        "group": "e2e.tandem.dev",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["minReplicas", "maxReplicas"],
                                "properties": {
                                    "minReplicas": {"type": "integer", "minimum": 0},
                                    "maxReplicas": {"type": "integer", "minimum": 0},
                                },
                                "x-kubernetes-validations": [
                                    {
                                        "rule": "self.minReplicas <= self.maxReplicas",
                                        "message": "minReplicas must not exceed maxReplicas",
                                        "fieldPath": ".minReplicas",
                                        "reason": "FieldValueInvalid",
                                    }
                                ],
                            }
                        },
                    }
                },
            }
        ],
    },
}


def test_a_node_made_not_ready_and_ready_again_keeps_its_status(k8s_cluster: DevCluster) -> None:
    """The fault suite's NotReady node (kwok Stages of our own): back to Ready, it keeps
    its addresses and kubelet endpoint (kwok's node-initialize alone dropped them)."""
    node = "h100-1"

    def status() -> dict[str, object]:
        found = _get_json(k8s_cluster, "node", node)["status"]
        assert isinstance(found, dict)
        return found

    def ready() -> str:
        conditions = status()["conditions"]
        assert isinstance(conditions, list)
        return str(next(c["status"] for c in conditions if c["type"] == "Ready"))

    before = status()
    k8s_cluster.kubectl("label", "node", node, f"{NOT_READY_LABEL}={NOT_READY_VALUE}")
    try:
        wait_until(lambda: ready() == "False", timeout_s=WAIT_S, what=f"{node} NotReady")
    finally:
        k8s_cluster.kubectl("label", "node", node, f"{NOT_READY_LABEL}-")
    wait_until(lambda: ready() == "True", timeout_s=WAIT_S, what=f"{node} Ready again")
    after = status()
    assert after.get("addresses") == before["addresses"]
    assert after.get("daemonEndpoints") == before["daemonEndpoints"]


def _widget(name: str, *, min_replicas: int, max_replicas: int) -> dict[str, object]:
    return {
        "apiVersion": "e2e.tandem.dev/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"minReplicas": min_replicas, "maxReplicas": max_replicas},
    }


def test_crd_cel_rule_rejects_an_invalid_object_naming_the_field(
    k8s_cluster: DevCluster, namespace: str
) -> None:
    _apply(k8s_cluster, WIDGET_CRD, "--server-side")
    k8s_cluster.wait_crd_established("widgets.e2e.tandem.dev", timeout_s=WAIT_S)
    _apply(k8s_cluster, _widget("ok", min_replicas=1, max_replicas=2), "-n", namespace)

    with pytest.raises(subprocess.CalledProcessError) as rejected:
        _apply(k8s_cluster, _widget("bad", min_replicas=3, max_replicas=2), "-n", namespace)
    message = rejected.value.stderr
    assert "spec.minReplicas" in message, message
    assert "minReplicas must not exceed maxReplicas" in message, message
    stored = k8s_cluster.kubectl("get", "widgets", "-n", namespace, "-o", "name").stdout.split()
    assert stored == ["widget.e2e.tandem.dev/ok"]


def test_leaderworkerset_crd_is_installed(k8s_cluster: DevCluster, namespace: str) -> None:
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "demo"},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": 2,
                "workerTemplate": {"spec": {"containers": [{"name": "w", "image": IMAGE}]}},
            },
        },
    }
    # Server-side dry run: the apiserver validates against the CRD schema, stores nothing.
    out = k8s_cluster.kubectl(
        "create", "-f", "-", "-n", namespace, "--dry-run=server", input=json.dumps(lws)
    ).stdout
    assert "leaderworkerset.leaderworkerset.x-k8s.io/demo created (server dry run)" in out


def test_cli_up_status_down_leaves_nothing_running(
    cluster_binaries: ClusterBinaries, tmp_path: Path
) -> None:
    """The detached CLI flow, on a second small cluster (profile ``cpu``)."""
    state_dir = tmp_path / "state"
    kubeconfig = tmp_path / "kubeconfig"
    cli = [sys.executable, "-m", "tandem.cli.main", "dev", "cluster"]
    where = ["--state-dir", str(state_dir)]

    def run(*args: str, timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*cli, *args, *where], capture_output=True, text=True, timeout=timeout_s, check=False
        )

    up = run("up", "--nodes", "cpu", "--kubeconfig", str(kubeconfig))
    try:
        assert up.returncode == 0, up.stderr
        assert up.stdout.strip() == str(kubeconfig.resolve())
        # The CLI process has exited; the cluster must still answer.
        kubectl = [str(cluster_binaries.kubectl), f"--kubeconfig={kubeconfig}"]
        nodes = subprocess.run(
            [*kubectl, "get", "nodes", "-o", "name"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.split()
        assert sorted(nodes) == ["node/cpu-0", "node/cpu-1", "node/cpu-2"]
        status = run("status")
        assert status.returncode == 0, status.stdout
        assert "dev cluster: running" in status.stdout
        assert status.stdout.count(" running ") == 5
    finally:
        down = run("down")
    assert down.returncode == 0, down.stderr
    after = run("status")
    assert after.returncode == 3
    assert "dev cluster: stopped" in after.stdout
