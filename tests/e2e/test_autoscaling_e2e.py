"""The operator's autoscaler and re-planner on the real test control plane, driven by a
real frontend.

The simulated pods run no containers, so the frontend whose router metrics drive the
decisions is a real one on 127.0.0.1: a local ``tandem up`` with null workers (the real
gRPC API, a fixed delay per token, so streams last seconds and load is exact). The
operator runs out of cluster with the chart's ServiceAccount token (so the chart's RBAC
is what is tested) and ``--frontend-metrics-url *=<that frontend>``: every
InferenceCluster here reads the same frontend. Kubernetes does the rest for real:
WorkerPool ``/scale`` -> Deployment -> ReplicaSet -> pods (kwok) -> status.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tandem.devcluster import DevCluster
from tandem.devcluster.probes import ProbeTimeoutError, wait_until
from tandem.runtime.state import Phase, cluster_dir, read_state
from tandem_dev.harness import OperatorProcess, write_token_kubeconfig

pytestmark = [pytest.mark.k8s, pytest.mark.parallel]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tandem"
EXAMPLE = REPO / "manifests" / "examples" / "reference-cpu.yaml"
H100_EXAMPLE = REPO / "manifests" / "examples" / "gpt-oss-20b-h100.yaml"
RELEASE = "tandem"
SYSTEM_NS = "tandem-system"
SERVICE_ACCOUNT = "tandem"
WAIT_S = 90.0
TOKEN_DELAY_S = 0.05  # null decode workers: 120 tokens = a 6 s stream
Json = dict[str, Any]


def eventually(check: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    wait_until(check, timeout_s=timeout_s, what=what)


# --------------------------------------------------------------------------- load


@dataclass
class Load:
    """``concurrency`` clients streaming completions back to back until stopped."""

    endpoint: str
    max_tokens: int = 120
    ok: int = 0
    failed: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, concurrency: int) -> Load:
        self._stop.clear()
        self._threads = [threading.Thread(target=self._client) for _ in range(concurrency)]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def _client(self) -> None:
        body = {"model": "reference", "prompt": "hi", "max_tokens": self.max_tokens,
                "stream": True}  # fmt: skip
        for _ in range(200):  # bounded, whatever happens
            if self._stop.is_set():
                return
            try:
                with httpx.stream(
                    "POST", f"{self.endpoint}/completions", json=body, timeout=60
                ) as response:
                    status = response.status_code
                    for _line in response.iter_lines():
                        pass
            except httpx.HTTPError as exc:
                with self._lock:
                    self.failed.append(repr(exc))
                continue
            with self._lock:
                if status == 200:
                    self.ok += 1
                else:
                    self.failed.append(f"HTTP {status}")


# --------------------------------------------------------------------------- setup


@dataclass
class Env:
    cluster: Any  # conftest's E2eCluster (test modules cannot import conftest)
    operator: OperatorProcess
    frontend: str  # base URL of the real frontend


def start_frontend(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A local cluster of null workers (no autoscaling of its own): its router's
    metrics are what the operator reads."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["name"] = "e2e-frontend"
    doc["spec"]["prefill"].update(replicas=1, minReplicas=1, maxReplicas=1)
    doc["spec"]["decode"].update(replicas=2, minReplicas=1, maxReplicas=2)
    spec = workdir / "frontend.yaml"
    spec.write_text(yaml.safe_dump(doc))
    home = workdir / "home"
    process = subprocess.Popen(
        [sys.executable, "-m", "tandem.runtime", "-f", str(spec), "--port", "0",
         "--worker-module", "tandem_dev.doubles.null_worker"],
        env={**os.environ, "TANDEM_HOME": str(home),
             "TANDEM_NULL_WORKER_TOKEN_DELAY": str(TOKEN_DELAY_S)},
        stdout=(workdir / "frontend.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip

    def running() -> bool:
        assert process.poll() is None, (workdir / "frontend.log").read_text()
        state = read_state(cluster_dir("e2e-frontend", home))
        return state is not None and state.phase is Phase.RUNNING

    eventually(running, "the local frontend to run")
    state = read_state(cluster_dir("e2e-frontend", home))
    assert state is not None
    return process, state.endpoint.removesuffix("/v1")


@pytest.fixture(scope="module")
def env(
    k8s_cluster: DevCluster, e2e_cluster: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    workdir = tmp_path_factory.mktemp("autoscaling")
    e2e_cluster.helm("upgrade", "--install", RELEASE, str(CHART), "-n", SYSTEM_NS,
         "--create-namespace")  # fmt: skip
    for crd in ("inferenceclusters.tandem.dev", "workerpools.tandem.dev"):
        k8s_cluster.wait_crd_established(crd, timeout_s=WAIT_S)
    token = k8s_cluster.kubectl(
        "create", "token", SERVICE_ACCOUNT, "-n", SYSTEM_NS, "--duration=2h"
    ).stdout.strip()
    kubeconfig = write_token_kubeconfig(k8s_cluster.kubeconfig, token, workdir / "sa.kubeconfig")
    frontend, base = start_frontend(workdir)
    operator = OperatorProcess(
        kubeconfig,
        log_path=workdir / "operator.log",
        lease_namespace=SYSTEM_NS,
        identity="autoscaling-e2e",
        extra_args=[f"--frontend-metrics-url=*={base}"],
    ).start()
    try:
        operator.wait_ready()
        eventually(lambda: operator.metric("tandem_operator_leader") == 1, "the operator to lead")
        yield Env(e2e_cluster, operator, base)
    finally:
        operator.stop()
        os.killpg(frontend.pid, signal.SIGTERM)
        frontend.wait(timeout=60)
        e2e_cluster.helm("uninstall", RELEASE, "-n", SYSTEM_NS, "--wait")
        print(f"operator and frontend logs in {workdir}")


@pytest.fixture
def namespace(env: Env, request: pytest.FixtureRequest) -> Iterator[str]:
    base = request.node.name.removeprefix("test_").replace("_", "-")[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    env.cluster.kubectl("create", "namespace", name)
    yield name
    env.cluster.kubectl("delete", "namespace", name, "--wait=false")


def apply_cluster(env: Env, namespace: str, name: str, spec: Json, example: Path = EXAMPLE) -> None:
    doc = yaml.safe_load(example.read_text())
    doc["metadata"].update(name=name, namespace=namespace)
    for key, value in spec.items():
        doc["spec"][key] = {**doc["spec"].get(key, {}), **value}
    env.cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))


def pool(env: Env, namespace: str, name: str) -> Json:
    return env.cluster.get_json("workerpool", name, "-n", namespace, "--show-managed-fields")


def running_pods(env: Env, namespace: str, cluster: str, role: str) -> list[Json]:
    pods = env.cluster.get_json(
        "pods",
        "-n",
        namespace,
        "-l",
        f"tandem.dev/cluster={cluster},tandem.dev/role={role}",
    )["items"]
    return [
        p
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def follows(env: Env, namespace: str, cluster: str, role: str, replicas: int) -> bool:
    """WorkerPool, Deployment and running pods all at ``replicas``."""
    name = f"{cluster}-{role}"
    found = env.cluster.kubectl("get", "deploy", name, "-n", namespace, "-o", "json", check=False)
    if found.returncode != 0:
        return False  # not created yet
    deployment = json.loads(found.stdout)
    return (
        pool(env, namespace, name)["spec"]["replicas"] == replicas
        and deployment["spec"]["replicas"] == replicas
        and len(running_pods(env, namespace, cluster, role)) == replicas
    )


def managers(obj: Json) -> set[str]:
    return {entry["manager"] for entry in obj["metadata"].get("managedFields") or []}


def events(env: Env, namespace: str, reason: str) -> list[Json]:
    found: list[Json] = env.cluster.get_json(
        "events", "-n", namespace, "--field-selector", f"reason={reason}"
    )["items"]
    return found


AUTOSCALING = {
    "enabled": True,
    "mode": "builtin",
    "intervalSeconds": 1,
    "decode": {
        "targetActiveSequencesPerReplica": 2,
        "scaleDownStabilizationSeconds": 3,
        "maxStepDown": 4,
    },
}


# --------------------------------------------------------------------------- tests


def test_frontend_metrics_drive_the_decode_pool_and_pods_follow(env: Env, namespace: str) -> None:
    name = "auto"
    apply_cluster(env, namespace, name, {
        "prefill": {"replicas": 1, "minReplicas": 1, "maxReplicas": 1},
        "decode": {"replicas": 1, "minReplicas": 1, "maxReplicas": 4},
        "autoscaling": AUTOSCALING,
    })  # fmt: skip
    eventually(lambda: follows(env, namespace, name, "decode", 1), "the decode pool to run")

    # 10 streams at 2 per replica: 5 replicas' worth, capped at maxReplicas 4.
    load = Load(f"{env.frontend}/v1").start(10)
    try:
        eventually(lambda: follows(env, namespace, name, "decode", 4), "decode to grow to 4")
        decode = pool(env, namespace, f"{name}-decode")
        assert decode["status"]["lastScaleReason"] == "ActiveSequencesAboveTarget"
        assert "tandem-autoscaler" in managers(decode)
        ic = env.cluster.get_json("ic", name, "-n", namespace)
        eventually(
            lambda: (
                env.cluster.condition(
                    env.cluster.get_json("ic", name, "-n", namespace), "ScalingLimited"
                ).get("reason")
                == "AtMaxReplicas"
            ),
            "ScalingLimited=True AtMaxReplicas while the load wants 5",
        )
        ic = env.cluster.get_json("ic", name, "-n", namespace)
        assert env.cluster.condition(ic, "ScalingLimited")["status"] == "True"
        assert "queueDepth" in ic["status"]["pools"]["decode"]
        assert events(env, namespace, "ActiveSequencesAboveTarget")
        assert events(env, namespace, "ScalingLimited")
    finally:
        load.stop()
    assert load.failed == [], load.failed[:5]

    # Idle: after the 3 s window the pool drains back to its floor. The
    # router knows none of these (simulated) pods, so all are idle and choose_victims
    # keeps the last by name; its pod-deletion-cost makes the ReplicaSet keep exactly that
    # one (left to itself, it would delete the newest pods first).
    before = {p["metadata"]["name"] for p in running_pods(env, namespace, name, "decode")}
    assert len(before) == 4
    eventually(lambda: follows(env, namespace, name, "decode", 1), "decode back to 1")
    (survivor,) = running_pods(env, namespace, name, "decode")
    assert survivor["metadata"]["name"] == max(before)
    annotations = survivor["metadata"].get("annotations") or {}
    assert annotations.get("controller.kubernetes.io/pod-deletion-cost") == "0"
    decode = pool(env, namespace, f"{name}-decode")
    assert decode["status"]["lastScaleReason"] in (
        "ActiveSequencesBelowTarget",
        "PoolIdle",
    )
    eventually(
        lambda: (
            env.cluster.condition(
                env.cluster.get_json("ic", name, "-n", namespace), "ScalingLimited"
            ).get("status")
            == "False"
        ),
        "ScalingLimited to clear",
    )
    print(f"{load.ok} requests during the scale-up, 0 failed; kept {max(before)}")


def test_external_mode_is_left_to_hpa_or_keda(env: Env, namespace: str) -> None:
    # Both clusters read the same frontend; only the builtin one may act on it.
    apply_cluster(env, namespace, "ext", {
        "decode": {"replicas": 2, "minReplicas": 1, "maxReplicas": 4},
        "autoscaling": {**AUTOSCALING, "mode": "external"},
    })  # fmt: skip
    apply_cluster(env, namespace, "own", {
        "decode": {"replicas": 1, "minReplicas": 1, "maxReplicas": 4},
        "autoscaling": AUTOSCALING,
    })  # fmt: skip
    eventually(lambda: follows(env, namespace, "ext", "decode", 2), "ext's pool to run")
    load = Load(f"{env.frontend}/v1").start(8)
    try:
        eventually(
            lambda: follows(env, namespace, "own", "decode", 4), "the builtin cluster to act"
        )
        # What an HPA or KEDA would do: write /scale. The operator follows, never reverts.
        env.cluster.kubectl("scale", "workerpool/ext-decode", "--replicas=3", "-n", namespace)
        eventually(lambda: follows(env, namespace, "ext", "decode", 3), "ext's pods to follow")
        rounds = env.operator.metric("tandem_operator_autoscaler_rounds_total")
        eventually(
            lambda: env.operator.metric("tandem_operator_autoscaler_rounds_total") >= rounds + 6,
            "more autoscaler rounds (for the builtin cluster)",
        )
    finally:
        load.stop()
    ext = pool(env, namespace, "ext-decode")
    assert ext["spec"]["replicas"] == 3
    assert "tandem-autoscaler" not in managers(ext)
    assert "lastScaleReason" not in (ext.get("status") or {})
    ic = env.cluster.get_json("ic", "ext", "-n", namespace)
    assert env.cluster.condition(ic, "ScalingLimited") == {}
    assert not [
        e
        for e in env.cluster.get_json("events", "-n", namespace)["items"]
        if e["involvedObject"]["name"] == "ext"
        and e.get("reportingComponent") == "tandem-autoscaler"
    ]
    assert load.failed == [], load.failed[:5]


def test_a_scale_up_that_cannot_be_scheduled_is_reported_and_held(env: Env, namespace: str) -> None:
    # A decode worker takes a whole 8-GPU node; the simulated cluster has two H100 nodes
    # (and other tests may hold some of their GPUs).
    name = "gpus"
    apply_cluster(env, namespace, name, {
        "model": {"source": None},  # no model volume in the simulated cluster
        "prefill": {"replicas": 0, "minReplicas": 0, "maxReplicas": 1},
        "decode": {"replicas": 1, "minReplicas": 1, "maxReplicas": 8, "gpusPerWorker": 8},
        "autoscaling": {**AUTOSCALING, "unschedulableTimeoutSeconds": 1,
                        "decode": {**AUTOSCALING["decode"], "maxStepUp": 1}},
    }, example=H100_EXAMPLE)  # fmt: skip
    try:
        eventually(lambda: follows(env, namespace, name, "decode", 1), "the decode pool to run")
    except ProbeTimeoutError:  # say why (a pod that never schedules, a missing volume)
        print(
            env.cluster.kubectl(
                "get", "pods,deploy,workerpools", "-n", namespace, "-o", "wide"
            ).stdout
        )
        print(env.cluster.kubectl("describe", "pods", "-n", namespace).stdout[-3000:])
        print(json.dumps(env.cluster.get_json("ic", name, "-n", namespace).get("status"), indent=1))
        raise
    load = Load(f"{env.frontend}/v1").start(16)  # 8 replicas' worth
    try:

        def held() -> bool:
            ic = env.cluster.get_json("ic", name, "-n", namespace)
            return env.cluster.condition(ic, "ScalingLimited").get("reason") == "Unschedulable"

        eventually(held, "ScalingLimited=True Unschedulable")
        size = pool(env, namespace, f"{name}-decode")["spec"]["replicas"]
        rounds = env.operator.metric("tandem_operator_autoscaler_rounds_total")
        eventually(
            lambda: env.operator.metric("tandem_operator_autoscaler_rounds_total") >= rounds + 5,
            "five more rounds",
        )
        # Not retried blindly: the load still wants 8, the pool stays where it got stuck.
        decode = pool(env, namespace, f"{name}-decode")
        assert decode["spec"]["replicas"] == size < 8
        assert decode["status"]["lastScaleReason"] == "ActiveSequencesAboveTarget"
        ic = env.cluster.get_json("ic", name, "-n", namespace)
        assert env.cluster.condition(ic, "ScalingLimited")["message"].startswith("decode: ")
        assert env.cluster.condition(ic, "Degraded")["reason"] == "InsufficientGPU"
        assert len(running_pods(env, namespace, name, "decode")) < size  # the rest pend
        assert events(env, namespace, "ScalingLimited")
    finally:
        load.stop()
    print(f"held at {size} replicas while the load asked for 8")


def test_the_served_workload_re_plans_the_cluster(env: Env, namespace: str) -> None:
    # Planned for 8k prompts and 1k answers at 6 req/s: one prefill and one decode worker.
    # The frontend then serves 2-token prompts and 16-token answers: outside the plan
    # (beyond 1.5x), so a window (30 s) later the operator plans for what it observed.
    name = "planned"
    apply_cluster(env, namespace, name, {
        "model": {"source": None},  # no model volume in the simulated cluster
        "prefill": {"replicas": 2, "minReplicas": 0, "maxReplicas": 4},
        "decode": {"replicas": 2, "minReplicas": 1, "maxReplicas": 4},
        "slo": {"ttftP90Seconds": 2, "itlP90Seconds": 0.02},
        "workload": {"isl": 8192, "osl": 1024, "requestsPerSecond": {"max": 6}},
        "planning": {"mode": "auto", "replan": {"windowSeconds": 30, "minIntervalSeconds": 600}},
    }, H100_EXAMPLE)  # fmt: skip

    def status() -> Json:
        found: Json = env.cluster.get_json("ic", name, "-n", namespace).get("status") or {}
        return found

    eventually(lambda: "shape" in status().get("plan", {}), "the first plan", timeout_s=120)
    first = status()["plan"]
    assert status()["workload"]["planned"]["source"] == "spec"
    eventually(lambda: follows_plan(env, namespace, name, first), "the pools to take the plan")

    load = Load(f"{env.frontend}/v1", max_tokens=16).start(4)
    try:
        eventually(
            lambda: status().get("workload", {}).get("replans") == 1,
            "a re-plan from the observed workload",
            timeout_s=150,
        )
        workload = status()["workload"]
        assert workload["planned"]["source"] == "observed"
        assert workload["planned"]["isl"] <= 16 and workload["planned"]["osl"] <= 16
        assert workload["observed"]["requests"] >= 30
        eventually(
            lambda: (
                status()["plan"]["specHash"] != first["specHash"] and "shape" in status()["plan"]
            ),
            "the plan for the observed workload",
            timeout_s=120,
        )
    finally:
        load.stop()
    second = status()["plan"]
    assert second["outcome"] == "met"
    eventually(lambda: follows_plan(env, namespace, name, second), "the pools to take the new plan")
    assert [e["reason"] for e in events(env, namespace, "Replanning")] == ["Replanning"]
    planned = events(env, namespace, "Planned")
    assert len(planned) == 2, [e["message"] for e in planned]
    assert load.failed == [], load.failed[:5]
    print(f"re-planned from {first['shape']} to {second['shape']}: {workload['observed']}")


def follows_plan(env: Env, namespace: str, cluster: str, plan: Json) -> bool:
    """Both pools at the plan's workers (a pool the plan leaves out at zero)."""
    prefill = (plan.get("prefill") or {}).get("workers", 0)
    decode = plan["decode"]["workers"]
    return follows(env, namespace, cluster, "prefill", prefill) and follows(
        env, namespace, cluster, "decode", decode
    )
