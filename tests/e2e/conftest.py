"""The e2e tier runs against one real control plane per session (tests/cluster).

``k8s_cluster`` builds the binaries if needed (tests/cluster/build.sh and
tests/lws/build-lws.sh, no-ops when their stamps match), starts etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, kwok and the LeaderWorkerSet controller with the
``default`` node profile, and stops them at the end of the session. When a
test that used the cluster fails, the tails of the component logs are attached to its
report; the full logs stay in the session's temporary directory. ``e2e_cluster`` wraps it
with the kubectl reads and InferenceCluster checks the e2e modules share.

``real_node_cluster`` is a second control plane with the ``real`` profile: a real node
``localhost`` (kubelet + containerd on this machine, pods on a local bridge) next to
simulated GPU nodes, with every image of ``make images`` already imported. It needs root.
It is a :class:`DevCluster`: ``kubeconfig``, ``kubectl_path``, ``kubectl(...)``,
``import_images(paths)``, and ``real_node`` with ``name``, ``pod_cidr``, ``bridge``. Only
one real node can run on a machine: a test that needs the machine to itself takes
``real_node_slot`` and calls ``release()``; the next ``real_node_cluster`` starts anew.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import select
import subprocess
import sys
import time
from collections.abc import Callable, Generator, Iterator
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
from tandem.devimages import PAUSE_IMAGE, BuiltImage, ensure_images

CLUSTER_FIXTURES = ("k8s_cluster", "cluster_binaries", "real_node_cluster", "real_node_slot")
REAL_NODE_FIXTURES = ("real_node_cluster", "real_node_slot", "built_images")
# A cold build is 15-25 minutes on 2 cores; a matching stamp makes it instant.
BUILD_TIMEOUT_S = 3600


@cache
def _build() -> str | None:
    """Run tests/cluster/build.sh, tests/lws/build-lws.sh (the LeaderWorkerSet
    controller) and tests/dns/build-coredns.sh (the real node's cluster DNS) once per
    session; the error text if one failed."""
    script = find_build_script()
    if script is None:
        return None  # installed outside a checkout: rely on TANDEM_CLUSTER_BIN, _LWS_BIN
    tests = script.parent.parent
    for build in (script, tests / "lws" / "build-lws.sh", tests / "dns" / "build-coredns.sh"):
        result = subprocess.run(
            [str(build)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
        )
        if result.returncode != 0:
            return f"{build} failed ({result.returncode}):\n{result.stderr[-4000:]}"
    return None


def pytest_collection_finish(session: pytest.Session) -> None:
    # Build here, before any test starts, so the per-test timeout (600 s) does not cut a
    # cold build short; the fixtures then find the stamp matching.
    if session.config.option.collectonly:
        return
    if any(set(CLUSTER_FIXTURES) & set(getattr(i, "fixturenames", ())) for i in session.items):
        _build()
    if any(set(REAL_NODE_FIXTURES) & set(getattr(i, "fixturenames", ())) for i in session.items):
        _build_images()


@cache
def _build_images() -> dict[str, BuiltImage] | str:
    """``make images`` once per session (a no-op when up to date); the error text if it
    failed."""
    try:
        return ensure_images()
    except Exception as err:  # ImageBuildError, or a missing tool, said in one line
        return f"make images failed: {err}"


@pytest.fixture(scope="session")
def built_images() -> dict[str, BuiltImage]:
    """The images of ``make images`` by reference (``images[ref].archive`` is the tar)."""
    images = _build_images()
    if isinstance(images, str):
        pytest.fail(images, pytrace=False)
    return images


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
            # Later tiers render LeaderWorkerSets.
            with_lws=True,
            # A crashed or killed pytest must not leave a control plane running.
            tie_to_parent=True,
        )
    )
    try:
        yield cluster
    finally:
        cluster.stop()


class RealNodeSlot:
    """The session's real-node cluster, started on first use; ``release()`` stops it so a
    test can have the machine's one real node to itself."""

    def __init__(
        self, binaries: ClusterBinaries, images: dict[str, BuiltImage], base: Path
    ) -> None:
        self._binaries = binaries
        self._images = images
        self._base = base
        self._starts = 0
        self._imported = False
        self.cluster: DevCluster | None = None

    def get(self, *, with_images: bool = True) -> DevCluster:
        """The running real-node cluster (started if needed); ``with_images`` also loads
        every image of ``make images`` into it (once per cluster: ~30 s for Tandem's)."""
        if self.cluster is None:
            if os.geteuid() != 0:
                pytest.fail("the real node needs root (cgroups, mounts, a bridge)", pytrace=False)
            self._starts += 1
            cluster = start_cluster(
                StartOptions(
                    state_dir=self._base / f"real-{self._starts}",
                    profile="real",
                    bin_dir=self._binaries.bin_dir,
                    with_lws=True,
                    # A killed pytest takes the control plane with it, and the real
                    # node's supervisor tears the node down when it sees us gone.
                    tie_to_parent=True,
                    pause_image=self._images[PAUSE_IMAGE].archive,
                )
            )
            self.cluster = cluster
            self._imported = False
        if with_images and not self._imported:
            others = [i.archive for ref, i in self._images.items() if ref != PAUSE_IMAGE]
            self.cluster.import_images(others)
            self._imported = True
        return self.cluster

    def release(self) -> None:
        if self.cluster is not None:
            cluster, self.cluster = self.cluster, None
            cluster.stop()


@pytest.fixture(scope="session")
def real_node_slot(
    cluster_binaries: ClusterBinaries,
    built_images: dict[str, BuiltImage],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RealNodeSlot]:
    slot = RealNodeSlot(cluster_binaries, built_images, tmp_path_factory.mktemp("realnode"))
    try:
        yield slot
    finally:
        slot.release()


@pytest.fixture
def real_node_cluster(real_node_slot: RealNodeSlot) -> DevCluster:
    return real_node_slot.get()


@pytest.fixture
def real_node_namespace(
    real_node_cluster: DevCluster, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A fresh namespace on the real-node cluster, named after the test module's
    ``NAMESPACE_PREFIX``, once its default ServiceAccount exists (a pod created before it
    is refused; waited for up to the module's ``WAIT_S``); deleted afterwards without
    waiting."""
    name = f"{request.module.NAMESPACE_PREFIX}-{secrets.token_hex(3)}"
    wait_s = request.module.WAIT_S
    real_node_cluster.kubectl("create", "namespace", name)
    real_node_cluster.kubectl(
        "wait", "--for=create", "serviceaccount/default", "-n", name, f"--timeout={wait_s:.0f}s"
    )
    yield name
    real_node_cluster.kubectl("delete", "namespace", name, "--wait=false")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        for name in ("k8s_cluster", "real_node_cluster"):
            cluster = getattr(item, "funcargs", {}).get(name)
            if isinstance(cluster, DevCluster):
                logs = cluster.layout.logs_dir
                report.sections.append((f"{name} logs ({logs})", cluster.log_tails(lines=30)))
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


PortForward = Callable[[DevCluster, str, int], contextlib.AbstractContextManager[int]]
_FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+) -> \d+")


@contextlib.contextmanager
def _port_forward(
    cluster: DevCluster, target: str, remote_port: int, *, namespace: str = "default"
) -> Iterator[int]:
    """``kubectl port-forward TARGET :REMOTE`` as a real subprocess on 127.0.0.1; yields
    the local port kubectl chose, stops kubectl on exit."""
    argv = [
        str(cluster.kubectl_path),
        f"--kubeconfig={cluster.kubeconfig}",
        "-n",
        namespace,
        "port-forward",
        "--address=127.0.0.1",
        target,
        f":{remote_port}",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        deadline = time.monotonic() + 30
        line = ""
        while not (match := _FORWARDING.search(line)):
            left = deadline - time.monotonic()
            ready, _, _ = select.select([proc.stdout], [], [], max(0.0, left))
            if not ready or proc.poll() is not None:
                stderr = proc.stderr.read() if proc.poll() is not None and proc.stderr else ""
                raise AssertionError(f"kubectl port-forward {target} did not start: {stderr}")
            line = proc.stdout.readline()
        yield int(match.group(1))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def port_forward() -> PortForward:
    """``with port_forward(cluster, "svc/NAME", 8000) as local_port:`` (a kubectl
    subprocess; ``namespace=`` as keyword)."""
    return _port_forward
