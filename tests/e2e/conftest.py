"""The e2e tier runs against one real control plane per session (tests/cluster).

``k8s_cluster`` builds the binaries if needed (tests/cluster/build.sh, a no-op when its
stamp matches), starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
kwok with the ``default`` node profile, and stops them at the end of the session. When a
test that used the cluster fails, the tails of the component logs are attached to its
report; the full logs stay in the session's temporary directory. ``e2e_cluster`` wraps it
with the kubectl reads and InferenceCluster checks the e2e modules share.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Generator, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tandem.devcluster import (
    DevCluster,
    StartOptions,
    find_build_script,
    locate_binaries,
    start_cluster,
)
from tandem.devcluster.binaries import ClusterBinaries

CLUSTER_FIXTURES = ("k8s_cluster", "cluster_binaries")
# A cold build is 15-25 minutes on 2 cores; a matching stamp makes it instant.
BUILD_TIMEOUT_S = 3600


@cache
def _build() -> str | None:
    """Run tests/cluster/build.sh once per session; the error text if it failed."""
    script = find_build_script()
    if script is None:
        return None  # installed outside a checkout: rely on TANDEM_CLUSTER_BIN
    result = subprocess.run(
        [str(script)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
    )
    if result.returncode != 0:
        return f"{script} failed ({result.returncode}):\n{result.stderr[-4000:]}"
    return None


def pytest_collection_finish(session: pytest.Session) -> None:
    # Build here, before any test starts, so the per-test timeout (600 s) does not cut a
    # cold build short; the fixtures then find the stamp matching.
    if session.config.option.collectonly:
        return
    if any(set(CLUSTER_FIXTURES) & set(getattr(i, "fixturenames", ())) for i in session.items):
        _build()


@pytest.fixture(scope="session")
def cluster_binaries() -> ClusterBinaries:
    error = _build()
    if error is not None:
        pytest.fail(error, pytrace=False)
    return locate_binaries()


@pytest.fixture(scope="session")
def k8s_cluster(
    cluster_binaries: ClusterBinaries, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DevCluster]:
    cluster = start_cluster(
        StartOptions(
            state_dir=tmp_path_factory.mktemp("devcluster"),
            profile="default",
            bin_dir=cluster_binaries.bin_dir,
            # Later tiers render LeaderWorkerSets; install the CRD whenever it was built.
            with_lws=cluster_binaries.lws_crd is not None,
            # A crashed or killed pytest must not leave a control plane running.
            tie_to_parent=True,
        )
    )
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    cluster = getattr(item, "funcargs", {}).get("k8s_cluster")
    if report.failed and isinstance(cluster, DevCluster):
        report.sections.append(
            (f"devcluster logs ({cluster.layout.logs_dir})", cluster.log_tails(lines=30))
        )
    return report


Json = dict[str, Any]


HELM = Path(sys.executable).parent / "helm"


class E2eCluster:
    """The session's cluster with the kubectl reads and InferenceCluster helpers the e2e
    modules share (the ``e2e_cluster`` fixture: test modules cannot import each other)."""

    def __init__(self, dev: DevCluster) -> None:
        self.dev = dev

    def kubectl(self, *args: str, **options: Any) -> subprocess.CompletedProcess[str]:
        return self.dev.kubectl(*args, **options)

    def helm(self, *args: str) -> str:
        """Run the venv's helm against this cluster; a failure fails the test with stderr."""
        argv = [str(HELM), f"--kubeconfig={self.dev.kubeconfig}", *args]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
        assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stderr}"
        return result.stdout

    def get_json(self, *args: str) -> Json:
        out: Json = json.loads(self.kubectl("get", *args, "-o", "json").stdout)
        return out

    def items(self, *args: str) -> list[Json]:
        found: list[Json] = self.get_json(*args)["items"]
        return found

    @staticmethod
    def condition(obj: Json, kind: str) -> Json:
        """The condition of type ``kind`` in ``obj``'s status; {} when it has none."""
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond["type"] == kind:
                return dict(cond)
        return {}

    def ic(self, namespace: str, name: str) -> Json:
        return self.get_json("ic", name, "-n", namespace)

    def patch_ic(self, namespace: str, name: str, spec: Json) -> None:
        self.kubectl(
            "patch", "ic", name, "-n", namespace, "--type=merge", "-p", json.dumps({"spec": spec})
        )

    def is_ready(self, namespace: str, name: str) -> bool:
        """Ready=True for the current generation."""
        obj = self.ic(namespace, name)
        status = obj.get("status") or {}
        return (
            self.condition(obj, "Ready").get("status") == "True"
            and status.get("observedGeneration") == obj["metadata"]["generation"]
        )


@pytest.fixture(scope="session")
def e2e_cluster(k8s_cluster: DevCluster) -> E2eCluster:
    return E2eCluster(k8s_cluster)
