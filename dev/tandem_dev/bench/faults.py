"""``python -m tandem_dev.bench --only faults``: the data-plane fault suite (tandem_dev.faults)
with its counts per fault, then the control-plane faults on the local test control plane
(tandem_dev.faults.control_plane). Needs root (network namespaces, a bridge, iptables,
tc) and the control-plane binaries (tests/cluster/build.sh)."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from tandem.devcluster import StartOptions, start_cluster
from tandem.devcluster.probes import wait_until
from tandem_dev.faults import scenarios
from tandem_dev.faults.bed import fault_bed
from tandem_dev.faults.control_plane import (
    ControlFaultResult,
    apiserver_restart_during_reconcile,
    gpu_node_not_ready,
    leader_killed_during_scale_down,
    render_control_table,
)
from tandem_dev.faults.report import render_table
from tandem_dev.harness import OperatorProcess

CRDS = Path(__file__).resolve().parents[3] / "manifests" / "crds"


def control_plane_rows(state_dir: Path) -> list[ControlFaultResult]:
    """The control-plane faults on a fresh dev cluster, two operators out of cluster."""
    cluster = start_cluster(StartOptions(state_dir=state_dir, profile="default"))
    started: list[OperatorProcess] = []
    try:
        cluster.kubectl("apply", "--server-side", "-f", str(CRDS))
        for crd in ("inferenceclusters.tandem.dev", "workerpools.tandem.dev"):
            cluster.wait_crd_established(crd)
        cluster.kubectl("create", "namespace", "tandem-system")
        for identity in ("a", "b"):
            process = OperatorProcess(cluster.kubeconfig, log_path=state_dir / f"op-{identity}.log",
                                      identity=identity)  # fmt: skip
            started.append(process.start())
            process.wait_ready(timeout=60)
        leader, standby = started
        wait_until(lambda: leader.metric("tandem_operator_leader") == 1, timeout_s=60,
                   what="operator a to lead")  # fmt: skip
        faults: list[Callable[[str], ControlFaultResult]] = [
            lambda ns: apiserver_restart_during_reconcile(cluster, ns, [leader, standby]),
            lambda ns: leader_killed_during_scale_down(cluster, ns, leader, standby),
            lambda ns: gpu_node_not_ready(cluster, ns),
        ]
        rows = []
        for index, fault in enumerate(faults):
            namespace = f"faults-{index}"
            cluster.kubectl("create", "namespace", namespace)
            cluster.kubectl("wait", "--for=create", "serviceaccount/default", "-n", namespace)
            rows.append(fault(namespace))
        return rows
    finally:
        for process in started:
            process.stop()
        cluster.stop()


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="tandem-faults-") as tmp:
        with fault_bed(scenarios.fault_cluster(), Path(tmp) / "bed") as bed:
            results = [fault(bed) for fault in scenarios.LOCAL_FAULTS]
        control = control_plane_rows(Path(tmp) / "control-plane")
    print(render_table(results))
    print(
        "\nOne bed for all rows: the reference engine's small random model, 1 prefill and 2 "
        "decode workers each in a network namespace of its own (KV over TCP across a "
        "private bridge, 3 s transfer timeout, 64 KiB socket send buffers so a kill cuts "
        "a pull as it would cut a real, much larger one), two frontends reached like a "
        "Service (a refused connection moves on to the other), 2-4 clients of the "
        "official `openai` client with retries off, 30 s deadline per request. Lost and "
        "hung must be 0 (`tests/integration/test_fault_suite.py` asserts it). Recovered "
        "in: from the kill (or the end of the partition / slow link) until every process "
        "is back, ready and seen healthy by both frontends, and a prompt was prefilled "
        "remotely again. This kernel has no `netem` (CONFIG_NET_SCH_NETEM unset): the "
        "slow link is a `tbf` rate limit, no added delay."
    )
    print("\n### Control plane (kwok nodes, operators out of cluster)\n")
    print(render_control_table(control))
    print(
        "\nThe local control plane of the e2e tier with two operators (leader and standby); "
        "kwok pods run no process, so no request flows here: the data plane under pod "
        "kills and operator failover is the real-node journey's "
        "(`tests/e2e/test_user_journey.py`, zero failed requests asserted). Extra children: "
        "objects beyond what the spec asks for (duplicates). "
        "`tests/e2e/test_control_plane_faults_e2e.py` asserts converged, 0 extra, 0 died."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
