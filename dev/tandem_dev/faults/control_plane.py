"""Control-plane faults on the local test control plane (kwok nodes): the API server
restarted during a reconcile, the leading operator killed during a scale-down, a GPU node
going NotReady with pods on it. Each counts what the fault left behind: whether the
cluster converged to its spec, children beyond the spec (duplicates), operators that
died, and how long convergence took.

kwok pods run no process, so no request flows here; the data plane under the same kind
of events (pods killed, operator failover) is the real-node journey's
(tests/e2e/test_user_journey.py), the data-plane faults are ``tandem_dev.faults``.
Like the harness, nothing here is imported by the operator itself.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tandem.devcluster import DevCluster
from tandem.devcluster.components import NOT_READY_LABEL, NOT_READY_VALUE
from tandem.devcluster.probes import ProbeTimeoutError, wait_until
from tandem_dev.harness import OperatorProcess, render_model_claim

EXAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "examples"
Json = dict[str, Any]
StartOperator = Callable[[str], OperatorProcess]


@dataclass(frozen=True, slots=True)
class ControlFaultResult:
    fault: str
    in_flight: str  # what the control plane was doing when the fault hit
    converged: bool
    extra_children: int  # objects beyond what the spec asks for
    operators_died: int
    seconds: float  # fault -> converged (or -> detected, for the node)
    note: str


def render_control_table(rows: list[ControlFaultResult]) -> str:
    lines = [
        "| fault | in flight | converged | extra children | operators died | time | "
        "what happened |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.fault} | {r.in_flight} | {'yes' if r.converged else 'NO'} "
            f"| {r.extra_children} | {r.operators_died} | {r.seconds:.1f} s | {r.note} |"
        )
    return "\n".join(lines)


class Cluster:
    """kubectl reads and writes on one namespace of a DevCluster."""

    def __init__(self, dev: DevCluster, namespace: str) -> None:
        self.dev, self.namespace = dev, namespace

    def get(self, *args: str) -> Json:
        out: Json = json.loads(self.dev.kubectl("get", *args, "-o", "json").stdout)
        return out

    def items(self, kind: str, selector: str = "") -> list[Json]:
        args = [kind, "-n", self.namespace] + (["-l", selector] if selector else [])
        found: list[Json] = self.get(*args)["items"]
        return found

    def apply_example(self, file: str, **spec: Any) -> str:
        doc = yaml.safe_load((EXAMPLES / file).read_text())
        doc["metadata"]["namespace"] = self.namespace
        for key, value in spec.items():
            doc["spec"].setdefault(key, {}).update(value)
        claim = render_model_claim(self.namespace, doc)
        if claim:
            items = {"apiVersion": "v1", "kind": "List", "items": claim}
            self.dev.kubectl("apply", "-f", "-", input=json.dumps(items))
        self.dev.kubectl("apply", "-f", "-", input=json.dumps(doc))
        name: str = doc["metadata"]["name"]
        return name

    def patch_spec(self, name: str, spec: Json) -> None:
        patch = json.dumps({"spec": spec})
        self.dev.kubectl("patch", "ic", name, "-n", self.namespace, "--type=merge", "-p", patch)

    def ready(self, name: str) -> bool:
        ic = self.get("ic", name, "-n", self.namespace)
        status = ic.get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or ()}
        ready: bool = (
            conditions.get("Ready", {}).get("status") == "True"
            and status.get("observedGeneration") == ic["metadata"]["generation"]
        )
        return ready

    def children(self, name: str, kind: str) -> list[Json]:
        live = self.items(kind, f"tandem.dev/cluster={name}")
        return [o for o in live if not o["metadata"].get("deletionTimestamp")]

    def extra_children(self, name: str, expected: dict[str, int]) -> int:
        """Objects beyond ``expected`` (kind -> count), once the garbage collector and
        the ReplicaSets had their chance."""
        return sum(max(0, len(self.children(name, k)) - n) for k, n in expected.items())


# What the two examples ask for, child by child.
H100_CHILDREN = {"workerpools": 2, "deployments": 3, "replicasets": 3, "services": 3,
                 "poddisruptionbudgets": 2, "configmaps": 1, "pods": 5}  # fmt: skip


def apiserver_restart_during_reconcile(
    dev: DevCluster, namespace: str, operators: list[OperatorProcess]
) -> ControlFaultResult:
    c = Cluster(dev, namespace)
    before = sum(op.metric("tandem_operator_watch_restarts_total") for op in operators)
    name = c.apply_example("gpt-oss-20b-h100.yaml")
    wait_until(lambda: bool(c.children(name, "workerpools")), timeout_s=60, what="first children")
    applied = len(c.children(name, "deployments"))
    started = time.monotonic()
    dev.restart("kube-apiserver")
    wait_until(lambda: c.ready(name), timeout_s=180, what="Ready after the restart")
    took = time.monotonic() - started
    restarts = sum(op.metric("tandem_operator_watch_restarts_total") for op in operators)
    return ControlFaultResult(
        "API server restart during a reconcile",
        f"gpt-oss-20b on H100 nodes, {applied} of 3 Deployments applied",
        True,
        c.extra_children(name, H100_CHILDREN),
        sum(not op.running() for op in operators),
        took,
        f"the reconcile finished after the restart ({restarts - before:.0f} watch error(s) "
        "counted; watches the API server closed cleanly are resumed without one)",
    )


def leader_killed_during_scale_down(
    dev: DevCluster, namespace: str, leader: OperatorProcess, standby: OperatorProcess
) -> ControlFaultResult:
    c = Cluster(dev, namespace)
    name = c.apply_example(
        "reference-cpu.yaml", decode={"replicas": 4, "maxReplicas": 4}, prefill={"replicas": 2}
    )
    wait_until(lambda: c.ready(name), timeout_s=120, what="4 decode workers Ready")
    c.patch_spec(name, {"decode": {"replicas": 1}, "prefill": {"replicas": 1}})
    leader.kill()  # SIGKILL: no Lease release; the standby waits for it to expire
    started = time.monotonic()

    def scaled_down() -> bool:
        pools = (c.get("ic", name, "-n", namespace).get("status") or {}).get("pools") or {}
        decode = len(c.children(name, "pods")) == 3  # frontend + 1 prefill + 1 decode
        return c.ready(name) and decode and pools.get("decode", {}).get("desired") == 1

    wait_until(scaled_down, timeout_s=120, what="the scale-down under the new leader")
    took = time.monotonic() - started
    children = {**H100_CHILDREN, "pods": 3}
    return ControlFaultResult(
        "operator leader SIGKILL during a scale-down",
        "decode 4 -> 1 and prefill 2 -> 1 just written",
        standby.metric("tandem_operator_leader") == 1,
        c.extra_children(name, children),
        int(not standby.running()),
        took,
        "the standby took the Lease after it expired and finished the scale-down; "
        f"its pool gauges: {_pool_gauges(standby, name)}",
    )


def _pool_gauges(operator: OperatorProcess, cluster: str) -> str:
    found = []
    for line in operator.metrics().splitlines():
        if line.startswith("tandem_operator_pool_replicas{") and f'"{cluster}"' in line:
            labels, value = line.rsplit(" ", 1)
            pool = labels.split('pool="')[1].split('"')[0]
            state = labels.split('state="')[1].split('"')[0]
            found.append(f"{pool} {state} {float(value):.0f}")
    return ", ".join(sorted(found)) or "none"


# What a platform team sets for quick failover of GPU workers: leave a NotReady or
# unreachable node after 15 s instead of Kubernetes' default 300 s.
QUICK_FAILOVER = [
    {"key": f"node.kubernetes.io/{taint}", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 15}
    for taint in ("not-ready", "unreachable")
]  # fmt: skip


def _where_it_stands(c: Cluster, name: str, seen_not_ready: list[float]) -> str:
    """What a timed-out wait saw last: the cluster's conditions and where its pods are."""
    ic = c.get("ic", name, "-n", c.namespace)
    conditions = [
        f"{k['type']}={k['status']} ({k.get('reason', '')})"
        for k in (ic.get("status") or {}).get("conditions") or ()
    ]
    pods = [
        f"{p['metadata']['name']} on {p['spec'].get('nodeName', '-')} {p['status'].get('phase')}"
        for p in c.children(name, "pods")
    ]
    return f"{_felt(seen_not_ready)}; conditions {conditions}; pods {pods}"


def _recovered(dev: DevCluster, node: str) -> bool:
    """Ready, and the node lifecycle controller's not-ready/unreachable taints are gone."""
    obj = json.loads(dev.kubectl("get", "node", node, "-o", "json").stdout)
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in obj["status"]["conditions"])
    taints = {t["key"] for t in obj["spec"].get("taints") or ()}
    return ready and not taints & {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}


def _felt(seen_not_ready: list[float]) -> str:
    if seen_not_ready:
        return f"status left Ready after {seen_not_ready[0]:.0f} s"
    return "status never seen leaving Ready"


def gpu_node_not_ready(dev: DevCluster, namespace: str) -> ControlFaultResult:
    c = Cluster(dev, namespace)
    quick = {"tolerations": QUICK_FAILOVER}
    name = c.apply_example("gpt-oss-20b-h100.yaml", prefill=quick, decode=quick)
    wait_until(lambda: c.ready(name), timeout_s=120, what="Ready on GPU nodes")
    pods = c.children(name, "pods")
    node = next(p["spec"]["nodeName"] for p in pods if "-decode-" in p["metadata"]["name"])
    on_node = sum(1 for p in pods if p["spec"]["nodeName"] == node)
    # The dev cluster's kwok turns a node so labelled NotReady (its own Stage), as a
    # kubelet reports a failed node; Kubernetes taints it and evicts what cannot stay.
    dev.kubectl("label", "node", node, f"{NOT_READY_LABEL}={NOT_READY_VALUE}")
    started = time.monotonic()
    seen_not_ready: list[float] = []

    def moved_and_ready() -> bool:
        ready = c.ready(name)
        if not ready and not seen_not_ready:
            seen_not_ready.append(time.monotonic() - started)
        left = [p for p in c.children(name, "pods") if p["spec"].get("nodeName") == node]
        # Every pod that was on the node is gone (evicted) and the cluster is Ready on the
        # others. Whether its status was seen leaving Ready in between is reported, not
        # required: kwok marks replacement pods Ready at once, and the kube-controller-
        # manager's marking the old ones NotReady races kwok's own pod stages.
        return ready and not left

    try:
        wait_until(moved_and_ready, timeout_s=240, what=f"the pods to leave {node}")
    except ProbeTimeoutError as exc:
        raise ProbeTimeoutError(f"{exc}: {_where_it_stands(c, name, seen_not_ready)}") from None
    finally:
        dev.kubectl("label", "node", node, f"{NOT_READY_LABEL}-")
        # The next test may need this node's GPUs: leave it Ready and untainted.
        wait_until(lambda: _recovered(dev, node), timeout_s=60, what=f"{node} Ready again")
    took = time.monotonic() - started
    nodes = sorted({p["spec"]["nodeName"] for p in c.children(name, "pods")})
    return ControlFaultResult(
        "kwok GPU node NotReady with pods on it",
        f"gpt-oss-20b Ready, {on_node} pod(s) on {node}; pools tolerate NotReady 15 s",
        True,
        c.extra_children(name, H100_CHILDREN),
        0,
        took,
        f"{_felt(seen_not_ready)} (pods evicted after the 15 s toleration), Ready with "
        f"every pod on {', '.join(nodes)} after {took:.0f} s",
    )
