"""Security on the real test control plane (kwok nodes: objects and admission, no
containers): each InferenceCluster's credentials Secret and its rotation, its
NetworkPolicy as the API server stores it, and the Pod Security Standards the rendered
pods meet, checked by the API server's own PodSecurity admission.

As in test_operator_e2e, the chart is installed and the operator runs out of cluster with
a token of the chart's ServiceAccount, so a permission the chart forgot fails here. The
operator's rotation phases are shortened to a few seconds
(``--credential-propagation-seconds``).
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tandem.api.v1alpha1 import InferenceCluster, PoolRole
from tandem.api.validate import load_inference_cluster
from tandem.devcluster import DevCluster
from tandem.devcluster.probes import wait_until
from tandem.security import CredentialBundle
from tandem.security.credentials import check_bundle
from tandem.security.pki import split_pem
from tandem_dev.harness import OperatorProcess, write_token_kubeconfig
from tandem_operator import names
from tandem_operator.render.children import (
    PoolHandle,
    render_cluster_children,
    render_pool_children,
)
from tandem_operator.render.pods import RenderSettings

pytestmark = [pytest.mark.k8s, pytest.mark.parallel]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tandem"
EXAMPLES = REPO / "manifests" / "examples"
HELM = Path(sys.executable).parent / "helm"
RELEASE = "security-e2e"
SYSTEM_NS = "security-e2e-system"
SERVICE_ACCOUNT = "security-e2e-tandem"
PROPAGATION_S = 3
WAIT_S = 60.0
# Prometheus, as the platform names it with --worker-metrics-from: the one peer besides
# the cluster's own pods that the policies admit (the operator runs out of the cluster
# here, so the frontends' metrics port admits no operator pod).
SCRAPER = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
Json = dict[str, Any]


@dataclass
class Env:
    cluster: Any
    operator: OperatorProcess


def eventually(check: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    wait_until(check, timeout_s=timeout_s, what=what)


def helm(cluster: DevCluster, *args: str) -> str:
    argv = [str(HELM), f"--kubeconfig={cluster.kubeconfig}", *args]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
    assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def env(
    k8s_cluster: DevCluster, e2e_cluster: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    logs = tmp_path_factory.mktemp("security-operator")
    helm(k8s_cluster, "install", RELEASE, str(CHART), "-n", SYSTEM_NS, "--create-namespace")
    for crd in ("inferenceclusters.tandem.dev", "workerpools.tandem.dev"):
        k8s_cluster.wait_crd_established(crd, timeout_s=WAIT_S)
    token = k8s_cluster.kubectl(
        "create", "token", SERVICE_ACCOUNT, "-n", SYSTEM_NS, "--duration=1h"
    ).stdout.strip()
    kubeconfig = write_token_kubeconfig(k8s_cluster.kubeconfig, token, logs / "sa.kubeconfig")
    operator = OperatorProcess(
        kubeconfig,
        log_path=logs / "operator.log",
        lease_namespace=SYSTEM_NS,
        identity="security",
        extra_args=[
            f"--credential-propagation-seconds={PROPAGATION_S}",
            f"--worker-metrics-from={json.dumps([SCRAPER])}",
        ],
    ).start()
    try:
        operator.wait_ready()
        eventually(lambda: operator.metric("tandem_operator_leader") == 1, "the operator to lead")
        yield Env(e2e_cluster, operator)
    finally:
        operator.stop()
        subprocess.run(
            [str(HELM), f"--kubeconfig={k8s_cluster.kubeconfig}", "uninstall", RELEASE],
            capture_output=True,
            timeout=180,
            check=False,
        )
        print(f"operator log: {logs / 'operator.log'}")


def create_namespace(cluster: Any, base: str, level: str | None) -> str:
    """A fresh namespace; ``level``: the Pod Security Standard the API server enforces."""
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    if level:
        cluster.kubectl(
            "label", "namespace", name,
            f"pod-security.kubernetes.io/enforce={level}",
            "pod-security.kubernetes.io/enforce-version=latest",
        )  # fmt: skip
    cluster.kubectl(
        "wait", "--for=create", "serviceaccount/default", "-n", name, f"--timeout={WAIT_S:.0f}s"
    )
    return name


@pytest.fixture
def restricted(env: Env, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace enforcing the "restricted" Pod Security Standard."""
    name = create_namespace(env.cluster, request.node.name[5:25].replace("_", "-"), "restricted")
    yield name
    env.cluster.kubectl("delete", "namespace", name, "--wait=false")


def apply_reference(cluster: Any, namespace: str) -> str:
    doc = yaml.safe_load((EXAMPLES / "reference-cpu.yaml").read_text())
    doc["metadata"]["namespace"] = namespace
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
    name: str = doc["metadata"]["name"]
    eventually(lambda: cluster.is_ready(namespace, name), f"{namespace}/{name} Ready")
    return name


def secret_of(cluster: Any, namespace: str, name: str) -> Json:
    secret: Json = cluster.get_json("secret", names.credentials_secret_name(name), "-n", namespace)
    return secret


def member_files(secret: Json) -> CredentialBundle:
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    return CredentialBundle(data["ca.crt"], data["tls.crt"], data["tls.key"])


def phase_of(secret: Json) -> str:
    phase: str = secret["metadata"]["annotations"][names.ANNOTATION_CREDENTIALS_PHASE]
    return phase


def test_pods_of_a_cluster_are_admitted_under_restricted_with_its_credentials_and_policy(
    env: Env, restricted: str
) -> None:
    """The ReplicaSets create every pod although the namespace enforces "restricted"; the
    Secret and the NetworkPolicy the operator applied are what the API server stored."""
    cluster = env.cluster
    name = apply_reference(cluster, restricted)
    pods = cluster.items("pods", "-n", restricted, "-l", f"tandem.dev/cluster={name}")
    assert sorted(p["metadata"]["labels"]["tandem.dev/role"] for p in pods) == [
        "decode",
        "frontend",
        "prefill",
    ]
    refused = [
        e
        for e in cluster.items("events", "-n", restricted)
        if e["reason"] == "FailedCreate" and "PodSecurity" in e["message"]
    ]
    assert refused == []

    secret = secret_of(cluster, restricted, name)
    uid = cluster.ic(restricted, name)["metadata"]["uid"]
    assert secret["metadata"]["ownerReferences"][0]["uid"] == uid
    assert phase_of(secret) == "Stable"
    server_name, _ = check_bundle(member_files(secret), datetime.now(UTC))
    assert server_name == f"{name}.tandem.internal"
    for pod in pods:
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "credentials"]
        items = {item["key"]: item["path"] for item in volume["secret"]["items"]}
        # Each role mounts its own pair as tls.*, never the other's key nor the next one.
        pair = "frontend" if pod["metadata"]["labels"]["tandem.dev/role"] == "frontend" else "tls"
        assert items == {"ca.crt": "ca.crt", f"{pair}.crt": "tls.crt", f"{pair}.key": "tls.key"}

    policies = {
        p["metadata"]["name"]: p
        for p in cluster.items(
            "networkpolicies", "-n", restricted, "-l", f"tandem.dev/cluster={name}"
        )
    }
    assert sorted(policies) == [f"{name}-frontend", f"{name}-workers"]
    for policy in policies.values():
        assert policy["metadata"]["ownerReferences"][0]["uid"] == uid
        assert policy["spec"]["policyTypes"] == ["Ingress"]
    # Workers: everything from the cluster's own pods; the HTTP side port (9090) from the
    # named scraper.
    workers = policies[f"{name}-workers"]["spec"]
    assert workers["podSelector"]["matchExpressions"][0]["values"] == ["prefill", "decode"]
    peers, scrape = workers["ingress"]
    assert peers["from"][0]["podSelector"]["matchLabels"] == {"tandem.dev/cluster": name}
    assert "ports" not in peers
    assert scrape == {"from": [SCRAPER], "ports": [{"protocol": "TCP", "port": 9090}]}
    # Frontends: the API port from anywhere (API keys decide who is served), the metrics
    # port (9091) only from the scraper.
    frontends = policies[f"{name}-frontend"]["spec"]
    assert frontends["podSelector"]["matchLabels"] == {
        "tandem.dev/cluster": name,
        "tandem.dev/role": "frontend",
    }
    api, metrics = frontends["ingress"]
    assert api == {"ports": [{"protocol": "TCP", "port": 8000}]}
    assert metrics == {"from": [SCRAPER], "ports": [{"protocol": "TCP", "port": 9091}]}


def test_a_rotation_goes_through_its_phases_and_rolls_no_pod(env: Env, restricted: str) -> None:
    cluster = env.cluster
    name = apply_reference(cluster, restricted)
    before = member_files(secret_of(cluster, restricted, name))
    pods_before = {
        p["metadata"]["name"]
        for p in cluster.items("pods", "-n", restricted, "-l", f"tandem.dev/cluster={name}")
    }
    generations = {
        d["metadata"]["name"]: d["metadata"]["generation"]
        for d in cluster.items("deploy", "-n", restricted, "-l", f"tandem.dev/cluster={name}")
    }
    cluster.kubectl(
        "annotate", "ic", name, "-n", restricted,
        f"{names.ANNOTATION_ROTATE_CREDENTIALS}=first",
    )  # fmt: skip
    seen: list[str] = []

    def rotated() -> bool:
        secret = secret_of(cluster, restricted, name)
        phase = phase_of(secret)
        if not seen or seen[-1] != phase:
            seen.append(phase)
        done = secret["metadata"]["annotations"][names.ANNOTATION_CREDENTIALS_ROTATION]
        return phase == "Stable" and done == "first"

    eventually(rotated, "the rotation to finish", timeout_s=10 * PROPAGATION_S + 30)
    assert seen[-3:] == ["Trusting", "Switching", "Stable"] or seen[-2:] == ["Switching", "Stable"]
    after = member_files(secret_of(cluster, restricted, name))
    assert after.cert != before.cert and after.key != before.key
    assert len(split_pem(after.trust)) == 1 and after.trust != before.trust
    check_bundle(after, datetime.now(UTC))
    # Nothing rolled: the pods pick the files up from their mounted Secret.
    assert {
        d["metadata"]["name"]: d["metadata"]["generation"]
        for d in cluster.items("deploy", "-n", restricted, "-l", f"tandem.dev/cluster={name}")
    } == generations
    assert {
        p["metadata"]["name"]
        for p in cluster.items("pods", "-n", restricted, "-l", f"tandem.dev/cluster={name}")
    } == pods_before


# ------------------------------------------------------- Pod Security, pod by pod


def rendered_pods(example: str, namespace: str) -> dict[str, Json]:
    """The frontend's and each pool's pod, as the operator renders them."""
    cr: InferenceCluster = load_inference_cluster(EXAMPLES / example)
    objects = render_cluster_children(cr, RenderSettings(), include_pool_replicas=True)
    for role in PoolRole:
        handle = PoolHandle(names.pool_name(cr.metadata.name, role), "uid", 1)
        objects += render_pool_children(cr, role, handle, RenderSettings())
    pods = {}
    for obj in objects:
        if obj["kind"] != "Deployment":
            continue
        template = obj["spec"]["template"]
        pods[template["metadata"]["labels"]["tandem.dev/role"]] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": obj["metadata"]["name"], "namespace": namespace},
            # The frontend's own ServiceAccount is the operator's to make; admission
            # only needs one that exists.
            "spec": template["spec"] | {"serviceAccountName": "default"},
        }
    return pods


def dry_run(cluster: Any, pod: Json) -> str:
    """Create ``pod`` with a server-side dry run (admission runs, nothing is stored);
    kubectl's error text, "" when admitted."""
    result = cluster.kubectl(
        "create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False
    )
    return "" if result.returncode == 0 else result.stderr


def test_gpu_workers_need_ipc_lock_and_root_and_nothing_else(env: Env) -> None:
    """What GPU workers need beyond the Pod Security Standards, as the API server sees
    it: "baseline" refuses only the IPC_LOCK capability; "restricted" also root."""
    cluster = env.cluster
    baseline = create_namespace(cluster, "psa-baseline", "baseline")
    strict = create_namespace(cluster, "psa-restricted", "restricted")
    try:
        for role, pod in rendered_pods("gpt-oss-20b-h100.yaml", strict).items():
            refusal = dry_run(cluster, pod)
            if role == "frontend":
                assert refusal == ""
                continue
            assert 'violates PodSecurity "restricted:latest"' in refusal, refusal
            assert '"IPC_LOCK"' in refusal and "runAsNonRoot" in refusal, refusal
            pod["metadata"]["namespace"] = baseline
            refusal = dry_run(cluster, pod)
            assert 'violates PodSecurity "baseline:latest"' in refusal, refusal
            assert 'non-default capabilities (container "worker" must not include "IPC_LOCK"' in (
                refusal
            )
            assert "runAsNonRoot" not in refusal and "hostPath" not in refusal
    finally:
        cluster.kubectl("delete", "namespace", baseline, strict, "--wait=false")


def test_the_operators_own_pod_passes_restricted(env: Env, restricted: str) -> None:
    rendered = helm(env.cluster.dev, "template", "t", str(CHART), "-n", restricted)
    (deployment,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "operator", "namespace": restricted},
        "spec": deployment["spec"]["template"]["spec"] | {"serviceAccountName": "default"},
    }
    assert dry_run(env.cluster, pod) == ""
