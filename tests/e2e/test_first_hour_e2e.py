"""A newcomer's first hour on a fresh dev cluster, as README.md tells it: `export
KUBECONFIG=$(tandem dev cluster up)` (twice), `tandem operator run` before anything is
installed, a second operator by mistake, then the namespace, the CRDs and an autoscaled
InferenceCluster. Every problem on the way is one line, said once, with the fix; the
operator waits for what is missing and proceeds when it appears.

Its own control plane (profile ``cpu``): the session's cluster already has Tandem's CRDs,
and a newcomer's has none.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psutil
import pytest
import yaml

from tandem.devcluster.binaries import ClusterBinaries
from tandem.devcluster.ports import allocate_ports
from tandem.devcluster.probes import wait_until

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
TANDEM = Path(sys.executable).parent / "tandem"
EXAMPLE = REPO / "manifests" / "examples" / "reference-cpu-autoscaling.yaml"
WAIT_S = 60.0
NAMESPACE_MISSING = (
    "namespace tandem-system does not exist: create it (kubectl create namespace "
    "tandem-system) or pass --leader-election-namespace; waiting for it"
)


def crd_missing(plural: str) -> str:
    return (
        f"CRD {plural}.tandem.dev is not installed: `helm install tandem charts/tandem -n "
        "tandem-system --create-namespace` or `kubectl apply --server-side -f "
        "manifests/crds/` installs it; waiting for it"
    )


@dataclass
class Newcomer:
    """The newcomer's shell: a state dir for the dev cluster and $KUBECONFIG once set."""

    root: Path
    kubectl_path: Path
    kubeconfig: str = ""

    def tandem(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": self.kubeconfig, "TANDEM_HOME": str(self.root)}
        return subprocess.run(
            [str(TANDEM), *args], env=env, capture_output=True, text=True, timeout=240
        )

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            [str(self.kubectl_path), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout


@pytest.fixture
def newcomer(cluster_binaries: ClusterBinaries, tmp_path: Path) -> Iterator[Newcomer]:
    shell = Newcomer(tmp_path, cluster_binaries.kubectl)
    try:
        yield shell
    finally:
        down = shell.tandem("dev", "cluster", "down", "--state-dir", str(tmp_path / "dc"))
        assert down.returncode == 0, down.stderr


class Operator:
    """`tandem operator run` as typed in a second terminal (only $KUBECONFIG set)."""

    def __init__(self, shell: Newcomer, metrics_port: int) -> None:
        self.port = metrics_port
        self.log = shell.root / "operator.log"
        self._out: IO[bytes] = self.log.open("wb")
        self.process = subprocess.Popen(
            [str(TANDEM), "operator", "run", f"--metrics-port={metrics_port}"],
            env={**os.environ, "KUBECONFIG": shell.kubeconfig, "PYTHONUNBUFFERED": "1"},
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )

    def text(self) -> str:
        return self.log.read_text()

    def lines_with(self, needle: str) -> list[str]:
        return [line for line in self.text().splitlines() if needle in line]

    def wait_for(self, needle: str) -> None:
        def said() -> bool:
            assert self.process.poll() is None, self.text()
            return bool(self.lines_with(needle))

        wait_until(said, timeout_s=WAIT_S, what=f"the operator to log {needle!r}")

    def readyz(self) -> int:
        try:
            url = f"http://127.0.0.1:{self.port}/readyz"
            with urllib.request.urlopen(url, timeout=2) as response:
                return int(response.status)
        except urllib.error.HTTPError as err:
            return err.code

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=30)
        self._out.close()
        return code


def eventually(check: Callable[[], bool], what: str) -> None:
    wait_until(check, timeout_s=WAIT_S, what=what)


def condition(ic: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [c for c in (ic.get("status") or {}).get("conditions") or [] if c["type"] == kind]
    return found[0] if found else {}


def test_a_newcomers_first_hour(newcomer: Newcomer) -> None:
    state_dir = str(newcomer.root / "dc")
    # export KUBECONFIG=$(tandem dev cluster up), and again in a second terminal.
    up = newcomer.tandem("dev", "cluster", "up", "--nodes", "cpu", "--state-dir", state_dir)
    assert up.returncode == 0, up.stderr
    newcomer.kubeconfig = up.stdout.strip()
    assert Path(newcomer.kubeconfig).is_file()
    again = newcomer.tandem("dev", "cluster", "up", "--nodes", "cpu", "--state-dir", state_dir)
    assert (again.returncode, again.stdout) == (0, up.stdout)
    assert again.stderr.startswith(
        f"dev cluster: already running from {Path(state_dir).resolve()} (profile cpu, "
        "https://127.0.0.1:"
    )

    # The operator before anything is installed: one line, said once; it waits.
    (port,) = allocate_ports(1)
    operator = Operator(newcomer, port)
    try:
        operator.wait_for(NAMESPACE_MISSING)
        listening = [
            c.laddr.ip
            for c in psutil.Process(operator.process.pid).net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port
        ]
        assert listening == ["127.0.0.1"]  # out of a cluster: loopback only
        assert operator.readyz() == 503

        # A second operator by mistake, on the same port.
        second = newcomer.tandem("operator", "run", f"--metrics-port={port}")
        pid = operator.process.pid
        assert (second.returncode, second.stdout) == (1, "")
        assert second.stderr == (
            f"error: an operator is already running (pid {pid}, port {port}): use it, or "
            f"`kill {pid}` first (another one beside it, as a standby, needs its own "
            "--metrics-port)\n"
        )

        time.sleep(5)  # two more rounds of leader election
        assert len(operator.lines_with(NAMESPACE_MISSING)) == 1, operator.text()

        newcomer.kubectl("create", "namespace", "tandem-system")
        for plural in ("inferenceclusters", "workerpools"):
            operator.wait_for(crd_missing(plural))
        assert operator.readyz() == 503  # leading, but nothing to watch yet

        newcomer.kubectl("apply", "--server-side", "-f", str(REPO / "manifests" / "crds"))
        eventually(lambda: operator.readyz() == 200, "the operator to be ready")
        operator.wait_for("caches synced")
        for needle in (NAMESPACE_MISSING, crd_missing("inferenceclusters")):
            assert len(operator.lines_with(needle)) == 1, operator.text()

        # An autoscaled cluster, with no --frontend-metrics-url: said once, and in status.
        newcomer.kubectl("create", "namespace", "first-hour")
        doc = yaml.safe_load(EXAMPLE.read_text())
        doc["metadata"]["namespace"] = "first-hour"
        newcomer.kubectl("apply", "-f", "-", stdin=json.dumps(doc))

        def inactive() -> dict[str, Any]:
            ic = json.loads(
                newcomer.kubectl(
                    "get", "ic", "reference-autoscaling", "-n", "first-hour", "-o", "json"
                )
            )
            return condition(ic, "ScalingActive")

        eventually(lambda: inactive().get("reason") == "NoMetricsSource", "ScalingActive=False")
        assert inactive()["status"] == "False"
        assert (
            "run it with --frontend-metrics-url "
            "first-hour/reference-autoscaling=http://127.0.0.1:9091 (e.g. through `kubectl "
            "port-forward -n first-hour deploy/reference-autoscaling-frontend 9091`, the "
            "frontend's metrics port)"
        ) in inactive()["message"]
        interval = doc["spec"]["autoscaling"].get("intervalSeconds", 5)
        time.sleep(3 * interval)  # three more rounds of the autoscaler
        assert len(operator.lines_with("--frontend-metrics-url first-hour/")) == 1
        events = json.loads(
            newcomer.kubectl(
                "get",
                "events",
                "-n",
                "first-hour",
                "--field-selector",
                "reason=NoMetricsSource",
                "-o",
                "json",
            )
        )["items"]
        assert [e["type"] for e in events] == ["Warning"]
    finally:
        code = operator.stop()
    text = operator.text()
    assert code == 0, text
    assert "Traceback" not in text and "Unclosed" not in text, text
