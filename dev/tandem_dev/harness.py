"""Run the operator as a separate process, out of cluster: for e2e tests, benchmarks and
development against a local control plane (``tandem dev cluster up``).

Nothing here is imported by the operator itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import yaml

from tandem.devcluster.ports import allocate_ports

HEALTH_POLL_SECONDS = 0.2


def write_token_kubeconfig(admin_kubeconfig: Path, token: str, path: Path) -> Path:
    """A kubeconfig for the same API server that authenticates with ``token`` (e.g. a
    ServiceAccount token from ``kubectl create token``), so the operator runs with exactly
    the permissions the chart grants its ServiceAccount."""
    admin: dict[str, Any] = yaml.safe_load(admin_kubeconfig.read_text())
    current = admin.get("current-context")
    context = next((c for c in admin["contexts"] if c["name"] == current), admin["contexts"][0])[
        "context"
    ]
    cluster = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "token", "user": {"token": token}}],
        "contexts": [{"name": "token", "context": {"cluster": cluster["name"], "user": "token"}}],
        "current-context": "token",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


# What only the pod's own address and port decide: an operator out of the cluster keeps
# its own (OperatorProcess picks a free metrics port).
_IN_POD_FLAGS = ("--metrics-port=",)


def chart_operator_args(deployment: dict[str, Any]) -> list[str]:
    """The flags the chart's operator Deployment runs ``tandem operator run`` with, for
    the same operator out of the cluster: ``$(POD_NAMESPACE)`` resolved to the
    Deployment's namespace, the in-pod metrics port left out. So an e2e runs the operator
    with exactly what the chart's values rendered, and nothing else."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args: list[str] = container["args"]
    assert args[:2] == ["operator", "run"], args
    namespace = deployment["metadata"]["namespace"]
    return [
        a.replace("$(POD_NAMESPACE)", namespace)
        for a in args[2:]
        if not a.startswith(_IN_POD_FLAGS)
    ]


class OperatorProcess:
    """``tandem operator run`` in a child process, with its log in a file."""

    def __init__(
        self,
        kubeconfig: Path,
        *,
        log_path: Path,
        lease_namespace: str = "tandem-system",
        metrics_port: int | None = None,
        identity: str | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.metrics_port = metrics_port or allocate_ports(1)[0]
        self._args = [
            sys.executable,
            "-m",
            "tandem.cli.main",
            "operator",
            "run",
            f"--kubeconfig={kubeconfig}",
            "--metrics-host=127.0.0.1",
            f"--metrics-port={self.metrics_port}",
            f"--leader-election-namespace={lease_namespace}",
            *([f"--identity={identity}"] if identity else []),
            *extra_args,
        ]
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self._process is not None, "not started"
        return self._process.pid

    def start(self) -> OperatorProcess:
        self._log = self.log_path.open("ab")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self._process = subprocess.Popen(
            self._args, stdout=self._log, stderr=subprocess.STDOUT, env=env
        )
        return self

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _get(self, path: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.metrics_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until ``/readyz`` answers 200 (as leader: caches synced; else standing by)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise RuntimeError(f"operator exited; log: {self.log_tail()}")
            try:
                if self._get("/readyz")[0] == 200:
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(HEALTH_POLL_SECONDS)
        raise TimeoutError(f"operator not ready after {timeout}s; log: {self.log_tail()}")

    def metrics(self) -> str:
        return self._get("/metrics")[1]

    def metric(self, name: str) -> float:
        """Sum of a metric's samples, e.g. ``tandem_operator_leader``."""
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith(name) and line[len(name) : len(name) + 1] in (" ", "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL: a crash, with no chance to release the Lease."""
        if self._process is not None and self.running():
            self._process.send_signal(signal.SIGKILL)
            self._process.wait(timeout=10)
        self._close_log()

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (the operator releases its Lease), then SIGKILL if it lingers."""
        if self._process is not None and self.running():
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


MODEL_CLAIM_SIZE = "200Gi"


def render_model_claim(namespace: str, cluster: dict[str, Any]) -> list[dict[str, Any]]:
    """A claim, pre-bound to a static volume, for an InferenceCluster whose
    ``spec.model.source`` is ``pvc://CLAIM/...``; [] otherwise.

    GPU workers mount the model's PersistentVolumeClaim, and the scheduler does not place a
    pod whose claim is missing or unbound. Simulated clusters have no storage provisioner,
    so e2e tests apply these two objects next to the cluster (kwok runs no containers:
    nothing ever reads the ``hostPath``).
    """
    source = str(((cluster.get("spec") or {}).get("model") or {}).get("source") or "")
    if not source.startswith("pvc://"):
        return []
    claim = source.removeprefix("pvc://").split("/")[0]
    volume = f"{namespace}-{claim}"[:63].rstrip("-")
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume, "labels": {"tandem.dev/e2e": "model"}},
            "spec": {
                "capacity": {"storage": MODEL_CLAIM_SIZE},
                "accessModes": ["ReadOnlyMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": "/models"},
                "claimRef": {"namespace": namespace, "name": claim},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": MODEL_CLAIM_SIZE}},
            },
        },
    ]
