"""The operator on the real test control plane, installed the way a platform team does it.

One module-scoped setup: ``helm install`` the chart (CRDs, RBAC, the in-cluster operator
Deployment, whose kwok pods run no containers), then run the operator *out of cluster*
with a token of the chart's own ServiceAccount, so every request it makes is checked
against the chart's RBAC: a missing permission fails these tests.

Tests run in file order and share the installation; each uses its own namespace.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tandem.devcluster import DevCluster
from tandem.devcluster.probes import wait_until
from tandem_dev.harness import (
    OperatorProcess,
    render_model_claim,
    write_token_kubeconfig,
)

pytestmark = [pytest.mark.k8s, pytest.mark.parallel]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tandem"
EXAMPLES = REPO / "manifests" / "examples"
RELEASE = "tandem"
SYSTEM_NS = "tandem-system"
SERVICE_ACCOUNT = "tandem"  # the chart's full name for release "tandem"
WAIT_S = 60.0
Json = dict[str, Any]


@dataclass
class Env:
    cluster: Any
    sa_kubeconfig: Path
    logs: Path
    operator: OperatorProcess

    def start_operator(self, identity: str) -> OperatorProcess:
        process = OperatorProcess(
            self.sa_kubeconfig,
            log_path=self.logs / f"operator-{identity}.log",
            lease_namespace=SYSTEM_NS,
            identity=identity,
        )
        return process.start()


def eventually(check: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    wait_until(check, timeout_s=timeout_s, what=what)


def apply_file(cluster: Any, path: Path, namespace: str) -> str:
    doc = yaml.safe_load(path.read_text())
    doc["metadata"]["namespace"] = namespace
    claim = render_model_claim(namespace, doc)  # GPU workers mount the model's PVC
    if claim:
        cluster.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": claim}),
        )
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))
    name: str = doc["metadata"]["name"]
    return name


def wait_ready(cluster: Any, namespace: str, name: str, timeout_s: float = WAIT_S) -> None:
    eventually(lambda: cluster.is_ready(namespace, name), f"{namespace}/{name} Ready", timeout_s)


def assert_event(cluster: Any, namespace: str, name: str, reason: str) -> None:
    """Events follow the status write that caused them: poll for them."""

    def recorded() -> bool:
        events = cluster.items("events", "-n", namespace, "--field-selector", f"reason={reason}")
        return any(e["involvedObject"]["name"] == name for e in events)

    eventually(recorded, f"a {reason} event for {name}", timeout_s=10)


def children(cluster: Any, namespace: str, name: str, kind: str) -> list[Json]:
    return cluster.items(kind, "-n", namespace, "-l", f"tandem.dev/cluster={name}")


def replicas_of(cluster: Any, kind: str, namespace: str, name: str) -> int:
    value: int = cluster.get_json(kind, name, "-n", namespace)["spec"]["replicas"]
    return value


@pytest.fixture(scope="module")
def env(
    k8s_cluster: DevCluster, e2e_cluster: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    logs = tmp_path_factory.mktemp("operator")
    e2e_cluster.helm("install", RELEASE, str(CHART), "-n", SYSTEM_NS, "--create-namespace")
    for crd in ("inferenceclusters.tandem.dev", "workerpools.tandem.dev"):
        k8s_cluster.wait_crd_established(crd, timeout_s=WAIT_S)
    token = k8s_cluster.kubectl(
        "create", "token", SERVICE_ACCOUNT, "-n", SYSTEM_NS, "--duration=2h"
    ).stdout.strip()
    sa_kubeconfig = write_token_kubeconfig(k8s_cluster.kubeconfig, token, logs / "sa.kubeconfig")
    first = OperatorProcess(
        sa_kubeconfig, log_path=logs / "operator-a.log", lease_namespace=SYSTEM_NS, identity="a"
    ).start()
    environment = Env(e2e_cluster, sa_kubeconfig, logs, first)
    try:
        first.wait_ready()
        eventually(lambda: first.metric("tandem_operator_leader") == 1, "operator a to lead")
        yield environment
    finally:
        environment.operator.stop()
        print(f"operator logs in {logs}")


@pytest.fixture
def namespace(env: Env, request: pytest.FixtureRequest) -> Iterator[str]:
    base = request.node.name.removeprefix("test_").replace("_", "-")[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    env.cluster.kubectl("create", "namespace", name)
    env.cluster.kubectl(
        "wait", "--for=create", "serviceaccount/default", "-n", name, f"--timeout={WAIT_S:.0f}s"
    )
    yield name
    env.cluster.kubectl("delete", "namespace", name, "--wait=false")


# --------------------------------------------------------------------------- install


def test_chart_installs_the_operator_with_its_rbac(env: Env) -> None:
    deployment = env.cluster.get_json("deployment", "tandem-operator", "-n", SYSTEM_NS)
    assert deployment["spec"]["replicas"] == 2
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    # The in-cluster replicas run no containers here (kwok); ours holds the shared Lease.
    lease = env.cluster.get_json("lease", "tandem-operator", "-n", SYSTEM_NS)
    assert lease["spec"]["holderIdentity"] == "a"
    # The ServiceAccount may do what the operator needs and nothing broader.
    can = env.cluster.kubectl(
        "auth", "can-i", "delete", "inferenceclusters.tandem.dev",
        f"--as=system:serviceaccount:{SYSTEM_NS}:{SERVICE_ACCOUNT}", check=False,
    )  # fmt: skip
    assert can.stdout.strip() == "no"


# --------------------------------------------------------------------------- reference


def test_reference_cluster_becomes_ready_with_every_child(env: Env, namespace: str) -> None:
    cluster = env.cluster
    name = apply_file(cluster, EXAMPLES / "reference-cpu.yaml", namespace)
    wait_ready(cluster, namespace, name)

    row = cluster.kubectl("get", "ic", name, "-n", namespace, "--no-headers").stdout.split()
    assert row[:4] == [name, "True", "1", "1"], row
    status = cluster.ic(namespace, name)["status"]
    assert status["pools"]["prefill"] == {"desired": 1, "replicas": 1, "ready": 1, "updated": 1}
    assert status["pools"]["decode"] == {"desired": 1, "replicas": 1, "ready": 1, "updated": 1}
    assert status["endpoint"] == f"http://{name}-frontend.{namespace}.svc:8000"
    uid = cluster.ic(namespace, name)["metadata"]["uid"]

    pools = {p["metadata"]["name"]: p for p in children(cluster, namespace, name, "workerpools")}
    assert set(pools) == {f"{name}-prefill", f"{name}-decode"}
    for pool in pools.values():
        assert pool["metadata"]["ownerReferences"][0]["uid"] == uid
        assert pool["status"]["readyReplicas"] == 1
        assert pool["status"]["selector"].startswith("tandem.dev/cluster=")
    deployments = {d["metadata"]["name"] for d in children(cluster, namespace, name, "deploy")}
    assert deployments == {f"{name}-frontend", f"{name}-prefill", f"{name}-decode"}
    services = {s["metadata"]["name"]: s for s in children(cluster, namespace, name, "services")}
    assert set(services) == deployments
    assert services[f"{name}-decode"]["spec"]["clusterIP"] == "None"  # headless
    pdbs = {p["metadata"]["name"] for p in children(cluster, namespace, name, "pdb")}
    assert pdbs == {f"{name}-prefill", f"{name}-decode"}
    assert children(cluster, namespace, name, "configmaps")[0]["metadata"]["name"] == (
        f"{name}-config"
    )

    pods = children(cluster, namespace, name, "pods")
    assert len(pods) == 3
    for pod in pods:
        assert pod["status"]["phase"] == "Running"
        node = cluster.get_json("node", pod["spec"]["nodeName"])
        assert node["metadata"]["labels"]["tandem.dev/accelerator"] == "cpu"

    assert_event(cluster, namespace, name, "Ready")


def test_a_planned_reference_cluster_is_profiled_by_a_job(
    env: Env, namespace: str, tmp_path: Path
) -> None:
    """The profiling Job through the real API server, Job controller and the chart's RBAC.
    kwok completes the Job's pod without running it, so its termination message is empty:
    the operator must say so once, keep the hand-written shape and not profile again.
    (The command itself runs in tests/unit/operator/test_profiling.py's terms: the table a
    real run writes is tests/data/perf-table-smollm2-cpu.json.)"""
    cluster = env.cluster
    doc = yaml.safe_load((EXAMPLES / "reference-cpu.yaml").read_text())
    doc["spec"] |= {
        "planning": {"mode": "auto"},
        "slo": {"ttftP90Seconds": 10, "itlP90Seconds": 0.5},
        "workload": {"isl": 256, "osl": 32, "requestsPerSecond": {"max": 0.2}},
    }
    path = tmp_path / "planned.yaml"
    path.write_text(yaml.safe_dump(doc))
    name = apply_file(cluster, path, namespace)

    def slo() -> Json:
        conditions = cluster.ic(namespace, name).get("status", {}).get("conditions", [])
        return next((c for c in conditions if c["type"] == "SloPredicted"), {})

    eventually(lambda: slo().get("reason") == "ProfilingFailed", "the profile to be judged")
    assert "termination message is not a table" in slo()["message"]
    assert "\n" not in slo()["message"]
    uid = cluster.ic(namespace, name)["metadata"]["uid"]
    job = cluster.get_json("job", f"{name}-profile", "-n", namespace)
    assert job["metadata"]["ownerReferences"][0]["uid"] == uid
    assert job["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    table = cluster.get_json("configmap", f"{name}-perf-table", "-n", namespace)
    assert table["metadata"]["ownerReferences"][0]["uid"] == uid
    assert "tandem.dev/profile-failure" in table["metadata"]["annotations"]
    assert_event(cluster, namespace, name, "ProfilingFailed")
    wait_ready(cluster, namespace, name)  # the hand-written shape serves meanwhile
    assert replicas_of(cluster, "deploy", namespace, f"{name}-decode") == 1
    # Reported once: the same Job, never a second one.
    assert (
        cluster.get_json("job", f"{name}-profile", "-n", namespace)["metadata"]["uid"]
        == (job["metadata"]["uid"])
    )


def test_editing_the_spec_converges(env: Env, namespace: str) -> None:
    cluster = env.cluster
    name = apply_file(cluster, EXAMPLES / "reference-cpu.yaml", namespace)
    wait_ready(cluster, namespace, name)
    before = cluster.get_json("deploy", f"{name}-decode", "-n", namespace)
    config_hash = before["spec"]["template"]["metadata"]["annotations"]["tandem.dev/config-hash"]

    cluster.patch_ic(namespace, name, {"decode": {"replicas": 2}})
    wait_ready(cluster, namespace, name)
    assert replicas_of(cluster, "deploy", namespace, f"{name}-decode") == 2
    assert cluster.ic(namespace, name)["status"]["pools"]["decode"]["ready"] == 2

    # An engine option of the decode pool changes its config document: its pods roll,
    # the prefill pool's do not.
    prefill_before = cluster.get_json("deploy", f"{name}-prefill", "-n", namespace)
    cluster.patch_ic(namespace, name, {"decode": {"engineOptions": {"seed": 7}}})
    wait_ready(cluster, namespace, name)
    after = cluster.get_json("deploy", f"{name}-decode", "-n", namespace)
    assert after["spec"]["template"]["metadata"]["annotations"]["tandem.dev/config-hash"] != (
        config_hash
    )
    config = cluster.get_json("configmap", f"{name}-config", "-n", namespace)
    assert json.loads(config["data"]["decode.json"])["engine"]["options"] == {"seed": 7}
    prefill_after = cluster.get_json("deploy", f"{name}-prefill", "-n", namespace)
    assert prefill_after["metadata"]["generation"] == prefill_before["metadata"]["generation"]


def test_scaling_a_pool_by_hand_is_reverted_without_autoscaling(env: Env, namespace: str) -> None:
    cluster = env.cluster
    name = apply_file(cluster, EXAMPLES / "reference-cpu.yaml", namespace)
    wait_ready(cluster, namespace, name)
    pool = f"{name}-decode"
    cluster.kubectl("scale", f"workerpool/{pool}", "--replicas=2", "-n", namespace)
    eventually(
        lambda: replicas_of(cluster, "workerpool", namespace, pool) == 1,
        "the operator to restore spec.decode.replicas",
    )
    wait_ready(cluster, namespace, name)
    assert replicas_of(cluster, "deploy", namespace, pool) == 1


def test_scaling_a_pool_is_kept_with_external_autoscaling(env: Env, namespace: str) -> None:
    cluster = env.cluster
    name = apply_file(cluster, EXAMPLES / "reference-cpu.yaml", namespace)
    wait_ready(cluster, namespace, name)
    cluster.patch_ic(namespace, name, {"autoscaling": {"enabled": True, "mode": "external"}})
    wait_ready(cluster, namespace, name)
    pool = f"{name}-decode"
    # Handing over must not reset the size (server-side apply would drop a released field
    # back to the CRD default).
    assert replicas_of(cluster, "workerpool", namespace, pool) == 1

    cluster.kubectl("scale", f"workerpool/{pool}", "--replicas=2", "-n", namespace)
    # The operator acts on the new size (the Deployment follows) and leaves it alone.
    eventually(
        lambda: replicas_of(cluster, "deploy", namespace, pool) == 2, "the Deployment to follow"
    )
    eventually(
        lambda: (
            cluster.ic(namespace, name)["status"]["pools"]["decode"]
            == {"desired": 2, "replicas": 2, "ready": 2, "updated": 2}
        ),
        "status to count the new size",
    )
    wait_ready(cluster, namespace, name)
    assert replicas_of(cluster, "workerpool", namespace, pool) == 2

    # Turning autoscaling off gives the size back to the spec.
    cluster.patch_ic(namespace, name, {"autoscaling": {"enabled": False}})
    eventually(
        lambda: replicas_of(cluster, "workerpool", namespace, pool) == 1, "spec size restored"
    )


# --------------------------------------------------------------------------- GPUs


def test_gpu_cluster_lands_on_matching_gpu_nodes_and_reports_exhaustion(
    env: Env, namespace: str
) -> None:
    cluster = env.cluster
    name = apply_file(cluster, EXAMPLES / "gpt-oss-20b-h100.yaml", namespace)
    wait_ready(cluster, namespace, name)
    for role in ("prefill", "decode"):
        pods = cluster.items("pods", "-n", namespace, "-l", f"tandem.dev/role={role}")
        assert len(pods) == 2
        for pod in pods:
            node = cluster.get_json("node", pod["spec"]["nodeName"])
            assert node["metadata"]["labels"]["nvidia.com/gpu.product"].startswith("NVIDIA-H100")
            limits = pod["spec"]["containers"][0]["resources"]["limits"]
            assert limits["nvidia.com/gpu"] == "1"

    # The simulated cluster has 2 H100 nodes x 8 GPUs; ask for more than that.
    cluster.patch_ic(namespace, name, {"decode": {"replicas": 20, "maxReplicas": 24}})

    def reports_insufficient_gpu() -> bool:
        obj = cluster.ic(namespace, name)
        degraded = cluster.condition(obj, "Degraded")
        return (
            degraded.get("reason") == "InsufficientGPU"
            and cluster.condition(obj, "Ready").get("status") == "False"
            and obj["status"].get("observedGeneration") == obj["metadata"]["generation"]
        )

    eventually(reports_insufficient_gpu, "Degraded=InsufficientGPU")
    obj = cluster.ic(namespace, name)
    assert "Insufficient nvidia.com/gpu" in cluster.condition(obj, "Degraded")["message"]
    assert cluster.condition(obj, "Ready")["reason"] == "InsufficientGPU"
    assert obj["status"]["pools"]["decode"]["ready"] < 20
    assert_event(cluster, namespace, name, "InsufficientGPU")

    cluster.patch_ic(namespace, name, {"decode": {"replicas": 2}})
    wait_ready(cluster, namespace, name)
    # The pending pods leave with the scale-down; the next pass clears Degraded.
    eventually(
        lambda: cluster.condition(cluster.ic(namespace, name), "Degraded").get("status") == "False",
        "Degraded=False after the scale-down",
    )
    assert_event(cluster, namespace, name, "Recovered")


def test_multi_node_pool_renders_a_leader_worker_set(env: Env, namespace: str) -> None:
    cluster = env.cluster
    name = apply_file(cluster, EXAMPLES / "gpt-oss-20b-h100.yaml", namespace)
    wait_ready(cluster, namespace, name)
    cluster.patch_ic(namespace, name, {"decode": {"nodesPerWorker": 2}})
    eventually(
        lambda: bool(children(cluster, namespace, name, "leaderworkersets")), "a LeaderWorkerSet"
    )
    lws = children(cluster, namespace, name, "leaderworkersets")[0]
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert lws["metadata"]["ownerReferences"][0]["kind"] == "WorkerPool"
    uid = cluster.ic(namespace, name)["metadata"]["uid"]
    # Ray by default: the group's token, generated by the operator, owned by the cluster.
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    assert leader["command"][:4] == ["python", "-m", "tandem.worker.ray_launch", "leader"]
    token = cluster.get_json("secret", f"{name}-ray-token", "-n", namespace)
    assert token["metadata"]["ownerReferences"][0]["uid"] == uid
    assert token["data"]["token"]
    # MPI on request: mpirun's SSH keys, generated by the operator (no user Secret).
    cluster.patch_ic(namespace, name, {"decode": {"launcher": "mpi"}})

    def mpi_leader() -> bool:
        (group_set,) = children(cluster, namespace, name, "leaderworkersets")
        template = group_set["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
        return "tandem.worker.mpi_launch" in template["spec"]["containers"][0]["command"]

    eventually(mpi_leader, "the LeaderWorkerSet to launch an MPI world")
    keys = cluster.get_json("secret", f"{name}-mpi-ssh", "-n", namespace)
    assert keys["metadata"]["ownerReferences"][0]["uid"] == uid
    assert {"id_ed25519", "id_ed25519.pub", "authorized_keys"} <= keys["data"].keys()
    # The Deployment it replaces is pruned.
    eventually(
        lambda: (
            f"{name}-decode"
            not in {d["metadata"]["name"] for d in children(cluster, namespace, name, "deploy")}
        ),
        "the decode Deployment to be pruned",
    )

    # The test cluster's LWS controller runs the groups (on simulated nodes): the pool counts
    # the LeaderWorkerSet's ready groups, and the cluster is Ready again for the new spec.
    def ready_from_groups() -> bool:
        ic = cluster.ic(namespace, name)
        ready = cluster.condition(ic, "Ready")
        (group_set,) = children(cluster, namespace, name, "leaderworkersets")
        return (
            ready.get("status") == "True"
            and ready.get("observedGeneration") == ic["metadata"]["generation"]
            and group_set.get("status", {}).get("readyReplicas") == group_set["spec"]["replicas"]
        )

    eventually(ready_from_groups, "Ready from the LeaderWorkerSet's ready groups")


# Invalid InferenceClusters: tests/e2e/test_invalid_corpus_e2e.py sends the whole corpus
# (tests/data/invalid-inferenceclusters) to the API server.


# --------------------------------------------------------------------------- failures


def test_standby_takes_over_when_the_leader_stops(env: Env, namespace: str) -> None:
    standby = env.start_operator("b")
    try:
        standby.wait_ready()
        assert standby.metric("tandem_operator_leader") == 0
        env.operator.stop()  # SIGTERM: the leader releases the Lease
        eventually(lambda: standby.metric("tandem_operator_leader") == 1, "b to lead", 20)
    except BaseException:
        standby.stop()
        raise
    env.operator = standby
    name = apply_file(env.cluster, EXAMPLES / "reference-cpu.yaml", namespace)
    wait_ready(env.cluster, namespace, name)


def test_killing_the_operator_mid_reconcile_converges_without_duplicates(
    env: Env, namespace: str
) -> None:
    cluster = env.cluster
    name = apply_file(cluster, EXAMPLES / "gpt-oss-20b-h100.yaml", namespace)
    # Kill it as soon as the first children exist, before the cluster is complete.
    eventually(lambda: bool(children(cluster, namespace, name, "workerpools")), "first children")
    env.operator.kill()  # SIGKILL: no Lease release, the successor waits for expiry
    replacement = env.start_operator(f"c-{uuid.uuid4().hex[:4]}")
    env.operator = replacement
    replacement.wait_ready(timeout=60)
    wait_ready(cluster, namespace, name, timeout_s=90)

    expected = {f"{name}-frontend", f"{name}-prefill", f"{name}-decode"}
    assert {d["metadata"]["name"] for d in children(cluster, namespace, name, "deploy")} == expected
    assert len(children(cluster, namespace, name, "workerpools")) == 2
    assert len(children(cluster, namespace, name, "services")) == 3
    assert len(children(cluster, namespace, name, "pdb")) == 2
    assert len(children(cluster, namespace, name, "configmaps")) == 1
    replica_sets = children(cluster, namespace, name, "replicasets")
    assert len(replica_sets) == 3, [r["metadata"]["name"] for r in replica_sets]
    pods = [
        p
        for p in children(cluster, namespace, name, "pods")
        if not p["metadata"].get("deletionTimestamp")
    ]
    assert len(pods) == 5  # frontend 1 + prefill 2 + decode 2


def test_deleting_the_cluster_removes_every_child(env: Env, namespace: str) -> None:
    cluster = env.cluster
    name = apply_file(cluster, EXAMPLES / "reference-cpu.yaml", namespace)
    wait_ready(cluster, namespace, name)
    cluster.kubectl("delete", "ic", name, "-n", namespace)
    kinds = "workerpools,deploy,replicasets,services,pdb,configmaps,pods"

    def all_gone() -> bool:
        return not children(cluster, namespace, name, kinds)

    eventually(all_gone, "garbage collection of every child")
