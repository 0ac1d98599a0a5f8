"""Benchmark the operator on the local control plane: apply -> Ready, and memory.

    python -m tandem_dev.bench.operator [--clusters 100] [--state-dir DIR] [--write FILE]

Starts a dev cluster (etcd, apiserver, controller-manager, scheduler, kwok), installs the
CRDs, runs the operator out of cluster, then measures

1. the time from ``kubectl apply`` of one InferenceCluster to its Ready condition, and
2. the time from applying N clusters at once to all of them Ready, with the operator's
   resident memory (current and peak) at N, reconciles and API writes,

each next to the time the control plane alone needs to run the same pods as plain
Deployments (the floor no operator can beat on this machine), and the time until the
operator has applied every child and written a first status (its own share).

Ready means what status promises: every pool and the frontend have all desired pods
ready (kwok marks bound pods Running/Ready; no containers run). Each phase is bounded by
a deadline; this is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from tandem.devcluster import DevCluster, StartOptions, start_cluster
from tandem.devcluster.nodes import CPU_SERVER, render_node
from tandem_dev.harness import OperatorProcess

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "manifests" / "examples" / "reference-cpu.yaml"
CRDS = REPO / "manifests" / "crds"
NAMESPACE = "bench"
BASELINE_NAMESPACE = "bench-baseline"
WORKER_RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}}
# What the operator gives a frontend by default (pods.RenderSettings).
FRONTEND_RESOURCES = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}}
ROLES = ("prefill", "decode")
EXTRA_CPU_NODES = 6  # 100 clusters x 3 pods, twice (baseline), need more than 3 nodes
POLL_SECONDS = 0.1


@dataclass(frozen=True, slots=True)
class Result:
    clusters: int
    seconds_to_applied: float  # every cluster's children applied and status written
    seconds_to_ready: float  # every cluster Ready
    baseline_seconds: float | None  # the same pods as plain Deployments, no operator
    rss_mib: float
    peak_rss_mib: float
    reconciles: float
    operator_cpu_seconds: float
    applies: float
    skipped_applies: float


def bench_cluster(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"] = {"name": name, "namespace": NAMESPACE}
    doc["spec"]["prefill"]["resources"] = WORKER_RESOURCES
    doc["spec"]["decode"]["resources"] = WORKER_RESOURCES
    return doc


def baseline_deployment(name: str, resources: dict[str, Any]) -> dict[str, Any]:
    labels = {"app": name}
    container = {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": resources}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": BASELINE_NAMESPACE},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


class Reader:
    """Lists objects straight over HTTPS: polling with kubectl would spend a CPU on process
    start-ups, competing with the very control plane being measured."""

    def __init__(self, kubeconfig: Path) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        self._server = cluster["server"]
        ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        self._context = ssl.create_default_context(cadata=ca)
        self._token = config["users"][0]["user"]["token"]

    def items(self, path: str) -> list[dict[str, Any]]:
        request = urllib.request.Request(
            self._server + path, headers={"Authorization": f"Bearer {self._token}"}
        )
        with urllib.request.urlopen(request, context=self._context, timeout=10) as response:
            items: list[dict[str, Any]] = json.loads(response.read())["items"]
            return items


def cluster_progress(reader: Reader) -> tuple[set[str], set[str]]:
    """(clusters whose latest spec was applied, clusters Ready at that spec)."""
    applied, ready = set(), set()
    path = f"/apis/tandem.dev/v1alpha1/namespaces/{NAMESPACE}/inferenceclusters"
    for item in reader.items(path):
        status = item.get("status") or {}
        if status.get("observedGeneration") != item["metadata"]["generation"]:
            continue
        applied.add(item["metadata"]["name"])
        if any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"]):
            ready.add(item["metadata"]["name"])
    return applied, ready


def wait_for(check: Callable[[], bool], started: float, timeout: float, what: str) -> float:
    deadline = started + timeout
    while time.monotonic() < deadline:
        if check():
            return time.monotonic() - started
        time.sleep(POLL_SECONDS)
    raise TimeoutError(f"{what} not reached after {timeout:.0f}s")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (``/proc/PID/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def measure_baseline(cluster: DevCluster, prefix: str, count: int, timeout: float) -> float:
    """Seconds for the control plane alone to run the same pods (3 per cluster)."""
    docs = []
    for i in range(count):
        docs.append(baseline_deployment(f"{prefix}-{i}-frontend", FRONTEND_RESOURCES))
        docs += [baseline_deployment(f"{prefix}-{i}-{r}", WORKER_RESOURCES) for r in ROLES]
    reader = Reader(cluster.kubeconfig)
    path = f"/apis/apps/v1/namespaces/{BASELINE_NAMESPACE}/deployments"

    def all_ready() -> bool:
        ready = [
            d
            for d in reader.items(path)
            if d["metadata"]["name"].startswith(f"{prefix}-")
            and (d.get("status") or {}).get("readyReplicas") == 1
        ]
        return len(ready) == len(docs)

    started = time.monotonic()
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs), timeout_s=timeout)
    return wait_for(all_ready, started, timeout, f"{len(docs)} baseline Deployments ready")


def measure(
    cluster: DevCluster, operator: OperatorProcess, prefix: str, count: int, timeout: float
) -> Result:
    docs = [bench_cluster(f"{prefix}-{i}") for i in range(count)]
    names = {d["metadata"]["name"] for d in docs}
    reconciles = operator.metric("tandem_operator_reconcile_total")
    applies = operator.metric("tandem_operator_apply_total")
    skipped = operator.metric("tandem_operator_apply_skipped_total")
    cpu = cpu_seconds(operator.pid)
    reader = Reader(cluster.kubeconfig)
    started = time.monotonic()
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs), timeout_s=timeout)
    applied_after = wait_for(
        lambda: names <= cluster_progress(reader)[0], started, timeout, "children applied"
    )
    ready_after = wait_for(
        lambda: names <= cluster_progress(reader)[1], started, timeout, "clusters Ready"
    )
    status = Path(f"/proc/{operator.pid}/status").read_text()
    peak = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    result = Result(
        clusters=count,
        seconds_to_applied=applied_after,
        seconds_to_ready=ready_after,
        baseline_seconds=None,
        rss_mib=operator.rss_bytes() / 2**20,
        peak_rss_mib=peak / 1024,
        reconciles=operator.metric("tandem_operator_reconcile_total") - reconciles,
        operator_cpu_seconds=cpu_seconds(operator.pid) - cpu,
        applies=operator.metric("tandem_operator_apply_total") - applies,
        skipped_applies=operator.metric("tandem_operator_apply_skipped_total") - skipped,
    )
    baseline = measure_baseline(cluster, prefix, count, timeout)
    return replace(result, baseline_seconds=baseline)


def prepare(cluster: DevCluster) -> None:
    cluster.kubectl("apply", "--server-side", "-f", str(CRDS))
    for crd in ("inferenceclusters.tandem.dev", "workerpools.tandem.dev"):
        cluster.wait_crd_established(crd)
    nodes = [render_node(f"bench-cpu-{i}", CPU_SERVER) for i in range(EXTRA_CPU_NODES)]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(nodes))
    for namespace in (NAMESPACE, BASELINE_NAMESPACE, "tandem-system"):
        cluster.kubectl("create", "namespace", namespace)
    for namespace in (NAMESPACE, BASELINE_NAMESPACE):
        cluster.kubectl("wait", "--for=create", "serviceaccount/default", "-n", namespace)


def render_table(results: list[Result]) -> str:
    lines = [
        "| clusters | apply -> children applied (s) | apply -> all Ready (s) "
        "| same pods, no operator (s) | operator RSS (MiB) | peak RSS (MiB) | reconciles "
        "| operator CPU (s) | applies sent | applies skipped |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        baseline = f"{r.baseline_seconds:.2f}" if r.baseline_seconds is not None else "-"
        lines.append(
            f"| {r.clusters} | {r.seconds_to_applied:.2f} | {r.seconds_to_ready:.2f} "
            f"| {baseline} | {r.rss_mib:.0f} | {r.peak_rss_mib:.0f} | {r.reconciles:.0f} "
            f"| {r.operator_cpu_seconds:.1f} | {r.applies:.0f} | {r.skipped_applies:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per phase")
    parser.add_argument("--state-dir", type=Path, help="dev cluster state (default: a temp dir)")
    parser.add_argument("--write", type=Path, help="also write the markdown table here")
    args = parser.parse_args(argv)
    state_dir = args.state_dir or Path(tempfile.mkdtemp(prefix="tandem-bench-"))
    cluster = start_cluster(StartOptions(state_dir=state_dir, profile="default"))
    operator: OperatorProcess | None = None
    try:
        prepare(cluster)
        operator = OperatorProcess(cluster.kubeconfig, log_path=state_dir / "operator.log")
        operator.start().wait_ready(timeout=60)
        idle_mib = operator.rss_bytes() / 2**20
        results = [measure(cluster, operator, "one", 1, args.timeout)]
        results.append(measure(cluster, operator, "many", args.clusters, args.timeout))
        table = render_table(results)
        cpu = subprocess.run(["nproc"], capture_output=True, text=True, check=False).stdout
        header = (
            f"Operator benchmark ({cpu.strip()} CPUs, control plane and operator on one "
            f"machine; operator idle RSS {idle_mib:.0f} MiB)\n\n"
        )
        sys.stdout.write(header + table)
        if args.write:
            args.write.write_text(header + table)
    finally:
        if operator is not None:
            operator.stop()
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
