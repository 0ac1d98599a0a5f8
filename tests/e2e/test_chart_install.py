"""The chart's lifecycle on the real test control plane: install, upgrade, uninstall."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tandem.devcluster import DevCluster
from tandem.devcluster.probes import wait_until

pytestmark = [pytest.mark.k8s, pytest.mark.parallel]

CHART = Path(__file__).resolve().parents[2] / "charts" / "tandem"
RELEASE = "chart-e2e"
NAMESPACE = "chart-e2e"
WAIT_S = 60.0


def get(cluster: DevCluster, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def release_objects(cluster: DevCluster) -> list[str]:
    selector = f"app.kubernetes.io/instance={RELEASE}"
    namespaced = get(
        cluster, "deploy,sa,role,rolebinding,service,pdb", "-n", NAMESPACE, "-l", selector
    )["items"]
    cluster_wide = get(cluster, "clusterrole,clusterrolebinding", "-l", selector)["items"]
    return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in namespaced + cluster_wide)


def test_install_upgrade_uninstall(k8s_cluster: DevCluster, e2e_cluster: Any) -> None:
    notes = e2e_cluster.helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace")
    assert "kubectl port-forward svc/reference-frontend 8000:8000" in notes
    assert "export OPENAI_API_KEY=$(tandem keys add reference --tenant me)" in notes
    assert release_objects(k8s_cluster) == [
        "ClusterRole/chart-e2e-tandem-operator",
        "ClusterRoleBinding/chart-e2e-tandem-operator",
        "Deployment/chart-e2e-tandem-operator",
        "PodDisruptionBudget/chart-e2e-tandem-operator",
        "Role/chart-e2e-tandem-leader-election",
        "RoleBinding/chart-e2e-tandem-leader-election",
        "Service/chart-e2e-tandem-metrics",
        "ServiceAccount/chart-e2e-tandem",
    ]
    for crd in ("inferenceclusters.tandem.dev", "workerpools.tandem.dev"):
        k8s_cluster.wait_crd_established(crd, timeout_s=WAIT_S)
    # The pods are scheduled like real ones (kwok runs no containers): non-root and
    # read-only root filesystem pass admission as they are.
    k8s_cluster.kubectl(
        "rollout", "status", f"deploy/{RELEASE}-tandem-operator", "-n", NAMESPACE,
        f"--timeout={WAIT_S:.0f}s",
    )  # fmt: skip

    e2e_cluster.helm(
        "upgrade", RELEASE, str(CHART), "-n", NAMESPACE,
        "--set", "replicaCount=3", "--set", "operator.logLevel=debug",
    )  # fmt: skip
    deployment = get(k8s_cluster, "deploy", f"{RELEASE}-tandem-operator", "-n", NAMESPACE)
    assert deployment["spec"]["replicas"] == 3
    assert "--log-level=debug" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]

    e2e_cluster.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait")
    wait_until(
        lambda: release_objects(k8s_cluster) == [], timeout_s=WAIT_S, what="release objects gone"
    )
    # Helm never deletes CRDs (that would delete every InferenceCluster with them).
    assert get(k8s_cluster, "crd", "inferenceclusters.tandem.dev")["metadata"]["name"]
    k8s_cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


def test_the_crds_apply_from_kubectl_and_helm_alike(k8s_cluster: DevCluster) -> None:
    """A user applies manifests/crds with ``kubectl apply --server-side`` and later installs
    the chart (or the other way round): each field manager applies the same file, so
    neither may conflict with the other. A CRD that differs from the API server's stored
    form of it (a ``30.0`` stored as ``30``) conflicts here."""
    crds = str(CHART.parents[1] / "manifests" / "crds")
    k8s_cluster.kubectl("apply", "--server-side", "-f", crds)
    second = k8s_cluster.kubectl(
        "apply", "--server-side", "--field-manager=helm", "--dry-run=server", "-f", crds,
        check=False,
    )  # fmt: skip
    assert second.returncode == 0, second.stderr


def test_a_namespace_scoped_install_has_no_rights_outside_its_namespaces(
    k8s_cluster: DevCluster, e2e_cluster: Any
) -> None:
    """``operator.watchNamespaces``: Roles in those namespaces, nothing cluster-wide but
    reading nodes. Asked of the authorizer (``kubectl auth can-i``) and proven by reads
    with the operator's own ServiceAccount token."""
    release, namespace, watched = "scoped", "scoped-system", "scoped-serving"
    k8s_cluster.kubectl("create", "namespace", watched)
    e2e_cluster.helm(
        "install", release, str(CHART), "-n", namespace, "--create-namespace",
        "--set", f"operator.watchNamespaces={{{watched}}}",
    )  # fmt: skip
    account = f"system:serviceaccount:{namespace}:{release}-tandem"

    def can(*args: str) -> bool:
        run = k8s_cluster.kubectl("auth", "can-i", f"--as={account}", *args, check=False)
        return run.stdout.strip() == "yes"

    try:
        assert can("list", "secrets", "-n", watched)
        assert can("create", "roles", "-n", watched)
        assert can("list", "nodes")
        for elsewhere in ("default", namespace):
            assert not can("list", "secrets", "-n", elsewhere)
            assert not can("get", "secrets", "-n", elsewhere)
            assert not can("create", "roles", "-n", elsewhere)
            assert not can("list", "inferenceclusters.tandem.dev", "-n", elsewhere)
        assert not can("list", "secrets", "--all-namespaces")

        token = k8s_cluster.kubectl(
            "create", "token", f"{release}-tandem", "-n", namespace, "--duration=10m"
        ).stdout.strip()
        as_operator = ("--token", token)  # overrides the admin's token, same server
        here = k8s_cluster.kubectl("get", "secrets", "-n", watched, *as_operator, check=False)
        assert here.returncode == 0, here.stderr
        there = k8s_cluster.kubectl("get", "secrets", "-n", "default", *as_operator, check=False)
        assert there.returncode != 0 and "Forbidden" in there.stderr
    finally:
        e2e_cluster.helm("uninstall", release, "-n", namespace, "--wait")
        k8s_cluster.kubectl("delete", "namespace", namespace, watched, "--wait=false")
