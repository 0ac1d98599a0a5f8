"""A real node in the dev cluster: pods from a locally built image run on this machine and
answer kubectl logs, exec and port-forward; simulated pods are answered on loopback;
whatever happens to the process that owns the node, nothing it made is left behind.

Needs root (the real node makes cgroups, mounts, a bridge and iptables chains).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tandem.devcluster import DevCluster, DevClusterError, StartOptions, start_cluster
from tandem.devcluster.binaries import ClusterBinaries
from tandem.devcluster.probes import ProbeTimeoutError, wait_until
from tandem.devcluster.realnode import host
from tandem.devcluster.realnode.inventory import load_inventory
from tandem.devcluster.realnode.lock import current_holder
from tandem.devcluster.realnode.plan import (
    BRIDGE,
    CGROUP,
    GUARD_CHAINS,
    INVENTORY_FILE,
    KUBELET_CHAINS,
    LOCK_FILE,
    SHARED_DIRS,
)
from tandem.devcluster.state import ClusterState
from tandem.devimages import PAUSE_IMAGE, TANDEM_IMAGE, BuiltImage

pytestmark = pytest.mark.k8s

WAIT_S = 120.0
NAMESPACE_PREFIX = "real"  # real_node_namespace names its namespaces so
HTTP_PORT = 8080
REAL_NODE = {"tandem.dev/node-kind": "real"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
# The direct opener never sends cluster traffic through an http_proxy of the environment.
HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))

Json = dict[str, Any]


def _web_pod_spec() -> Json:
    """Python's http.server from the Tandem image (entrypoint ``python -m``); each
    readiness probe is a request it logs."""
    return {
        "nodeSelector": REAL_NODE,
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "web",
                "image": TANDEM_IMAGE,
                "imagePullPolicy": "Never",
                "args": ["http.server", str(HTTP_PORT), "--directory", "/opt/tandem/src"],
                "ports": [{"containerPort": HTTP_PORT}],
                "readinessProbe": {
                    "httpGet": {"path": "/", "port": HTTP_PORT},
                    "periodSeconds": 1,
                },
                "resources": {"limits": {"memory": "128Mi"}},
            }
        ],
    }


def _apply(cluster: DevCluster, namespace: str, *manifests: Json) -> None:
    documents = {"apiVersion": "v1", "kind": "List", "items": list(manifests)}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(documents))


def _get(cluster: DevCluster, *args: str) -> Json:
    out: Json = json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)
    return out


def _http_get(port: int) -> tuple[int, str]:
    with HTTP.open(f"http://127.0.0.1:{port}/", timeout=10) as response:
        return int(response.status), response.read().decode()


def test_real_pod_and_deployment_answer_logs_exec_and_port_forward(
    real_node_cluster: DevCluster, real_node_namespace: str, port_forward: Any
) -> None:
    cluster = real_node_cluster
    node = cluster.real_node
    assert node is not None
    assert TANDEM_IMAGE in node.images() and PAUSE_IMAGE in node.images()
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}, "spec": _web_pod_spec()}
    labels = {"app": "web-deploy"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web-deploy"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": _web_pod_spec()},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web-deploy"},
        "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": HTTP_PORT}]},
    }
    _apply(cluster, real_node_namespace, pod, deployment, service)
    ns = ("-n", real_node_namespace)
    cluster.kubectl("wait", *ns, "--for=condition=Ready", "pod/web", f"--timeout={WAIT_S:.0f}s")
    cluster.kubectl("rollout", "status", *ns, "deployment/web-deploy", f"--timeout={WAIT_S:.0f}s")

    pods = _get(cluster, "pods", *ns)["items"]
    assert len(pods) == 3
    for item in pods:
        assert item["spec"]["nodeName"] == node.name == "localhost"
        assert ipaddress.ip_address(item["status"]["podIP"]) in ipaddress.ip_network(node.pod_cidr)

    # The probes are requests http.server logs: kubectl logs reads them through the kubelet.
    wait_until(
        lambda: '"GET / HTTP/1.1" 200' in cluster.kubectl("logs", *ns, "web").stdout,
        timeout_s=30,
        what="probe requests in the pod's log",
    )
    hostname = cluster.kubectl(
        "exec", *ns, "web", "--", "python", "-c", "import socket; print(socket.gethostname())"
    ).stdout
    assert hostname.strip() == "web"

    # In-cluster clients reach the API server through the `kubernetes` Service address,
    # with the pod's ServiceAccount token; nothing else has a route out of the pod.
    reply = cluster.kubectl("exec", *ns, "web", "--", "python", "-c", IN_POD_PROBE).stdout
    assert json.loads(reply) == {
        "version": "v1.36.3",
        "forbidden_for": f"system:serviceaccount:{real_node_namespace}:default",
        "routes": sorted(["10.213.7.0/24", "10.96.0.1/32"]),
        "off_machine": "ENETUNREACH",
    }

    for target in ("pod/web", "svc/web-deploy"):
        remote = HTTP_PORT if target.startswith("pod/") else 80
        with port_forward(cluster, target, remote, namespace=real_node_namespace) as local:
            status, body = _http_get(local)
        assert status == 200, target
        assert "pyproject.toml" in body, target  # the directory the server lists

    (endpoints,) = _get(
        cluster, "endpointslices", *ns, "-l", "kubernetes.io/service-name=web-deploy"
    )["items"]
    ready = {a for e in endpoints["endpoints"] if e["conditions"]["ready"] for a in e["addresses"]}
    assert ready == {p["status"]["podIP"] for p in pods if p["metadata"]["name"] != "web"}

    uids = {p["metadata"]["uid"] for p in pods}
    cluster.kubectl("delete", *ns, "deployment/web-deploy", "pod/web", "svc/web-deploy", "--wait")
    wait_until(
        lambda: not _get(cluster, "pods", *ns)["items"], timeout_s=WAIT_S, what="pods deleted"
    )
    # Their containers are gone from the machine too: no cgroup of those pods is left.
    wait_until(lambda: not _pod_cgroups(uids), timeout_s=WAIT_S, what="the pods' cgroups removed")


# Run inside a real pod: the API server via KUBERNETES_SERVICE_HOST (who am I, which
# version), the pod's routes, and a connection to an address off this machine.
IN_POD_PROBE = """\
import errno, ipaddress, json, os, socket, ssl, urllib.error, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
base = f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}"
tls = ssl.create_default_context(cafile=f"{sa}/ca.crt")
auth = {"Authorization": "Bearer " + open(f"{sa}/token").read()}
def get(path):
    request = urllib.request.Request(base + path, headers=auth)
    try:
        return json.load(urllib.request.urlopen(request, context=tls, timeout=10))
    except urllib.error.HTTPError as err:
        return json.load(err)
version = get("/version")["gitVersion"]
denied = get("/api/v1/nodes")["message"].split('"')[1]
routes = []
for line in open("/proc/net/route").read().splitlines()[1:]:
    fields = line.split()
    dest = ipaddress.IPv4Address(bytes.fromhex(fields[1])[::-1])
    mask = bin(int.from_bytes(bytes.fromhex(fields[7]), "little")).count("1")
    routes.append(f"{dest}/{mask}")
try:
    socket.create_connection(("192.0.2.1", 80), timeout=5)
    off = "connected"
except OSError as err:
    off = errno.errorcode.get(err.errno, str(err))
print(json.dumps({"version": version, "forbidden_for": denied, "routes": sorted(routes),
                  "off_machine": off}))
"""


def _pod_cgroups(uids: set[str]) -> list[str]:
    found = []
    for cgroup in host.existing_cgroups(f"/{CGROUP}/kubepods"):
        for directory, _, _ in os.walk(cgroup):
            if any(Path(directory).name.endswith(uid) for uid in uids):
                found.append(directory)
    return found


def _nodes_with_addresses(cluster: DevCluster) -> list[Json]:
    """Every node once each reports its addresses: kwok and the kubelet write a node's
    status after the node exists (a kubelet registers first, then reports), so a node
    may briefly have none."""
    nodes: list[Json] = []

    def all_reported() -> bool:
        nodes[:] = _get(cluster, "nodes")["items"]
        return all(n.get("status", {}).get("addresses") for n in nodes)

    try:
        wait_until(all_reported, timeout_s=WAIT_S, what="every node's addresses")
    except ProbeTimeoutError:
        silent = [n["metadata"]["name"] for n in nodes if not n.get("status", {}).get("addresses")]
        pytest.fail(f"nodes without addresses after {WAIT_S:.0f} s: {silent}")
    return nodes


@pytest.mark.parametrize("which", ["k8s_cluster", "real_node_cluster"])
def test_simulated_pods_are_answered_on_loopback_and_never_listed_as_endpoints(
    which: str, request: pytest.FixtureRequest, port_forward: Any
) -> None:
    cluster: DevCluster = request.getfixturevalue(which)
    for item in _nodes_with_addresses(cluster):
        addresses = {a["type"]: a["address"] for a in item["status"]["addresses"]}
        if item["metadata"]["name"] == "localhost":  # the real node
            assert cluster.real_node is not None
            assert addresses["Hostname"] == "localhost"
            gateway = ipaddress.ip_address(addresses["InternalIP"])
            assert gateway in ipaddress.ip_network(cluster.real_node.pod_cidr)
            continue
        assert addresses == {"InternalIP": "127.0.0.1"}, item["metadata"]["name"]
        port = item["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        assert port > 0  # kwok's own server, never the default 10250

    namespace = f"sim-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl(
        "wait",
        "--for=create",
        "serviceaccount/default",
        "-n",
        namespace,
        f"--timeout={WAIT_S:.0f}s",
    )
    ns = ("-n", namespace)
    try:
        sim = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "sim", "labels": {"app": "sim"}},
            "spec": {
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-B200"},
                "tolerations": [GPU_TOLERATION],
                "containers": [{"name": "main", "image": PAUSE_IMAGE}],
            },
        }
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "sim"},
            "spec": {"selector": {"app": "sim"}, "ports": [{"port": 80}]},
        }
        _apply(cluster, namespace, sim, service)
        cluster.kubectl("wait", *ns, "--for=condition=Ready", "pod/sim", f"--timeout={WAIT_S:.0f}s")
        pod_ip = _get(cluster, "pod", "sim", *ns)["status"]["podIP"]
        assert ipaddress.ip_address(pod_ip) in LOOPBACK

        # kwok answers for its nodes, on 127.0.0.1: there is no container to read or enter.
        logs = cluster.kubectl("logs", *ns, "sim", check=False, timeout_s=30)
        assert logs.returncode != 0
        assert 'no logs found for container "main"' in logs.stderr, logs.stderr
        exec_ = cluster.kubectl("exec", *ns, "sim", "--", "true", check=False, timeout_s=30)
        assert exec_.returncode != 0
        assert 'no exec found for container "main"' in exec_.stderr, exec_.stderr
        forward = port_forward(cluster, "pod/sim", 80, namespace=namespace)
        with forward as local, pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            _http_get(local)

        # The API refuses loopback endpoints: no Service ever hands out a simulated pod.
        time.sleep(2)  # the EndpointSlice controller has had its chance
        slices = _get(cluster, "endpointslices", *ns, "-l", "kubernetes.io/service-name=sim")
        addresses = [
            a for s in slices["items"] for e in s.get("endpoints") or [] for a in e["addresses"]
        ]
        assert addresses == []
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")


def test_a_second_real_node_is_refused_in_one_line_naming_the_first(
    real_node_cluster: DevCluster, cluster_binaries: ClusterBinaries, tmp_path: Path
) -> None:
    assert real_node_cluster.real_node is not None
    with pytest.raises(DevClusterError) as refused:
        start_cluster(
            StartOptions(state_dir=tmp_path, profile="real", bin_dir=cluster_binaries.bin_dir)
        )
    message = str(refused.value)
    assert "\n" not in message
    assert real_node_cluster.real_node.plan.root in message
    assert f"pid {real_node_cluster.real_node.record.supervisor.pid}" in message
    assert not (tmp_path / "state.json").exists()  # refused before anything started


# Crash cleanup: a separate owner process starts a real-node cluster and runs a pod.
OWNER = """\
import json, sys, time
from pathlib import Path
from tandem.devcluster import StartOptions, start_cluster
state_dir, pause, bin_dir = (Path(a) for a in sys.argv[1:4])
cluster = start_cluster(StartOptions(state_dir=state_dir, profile="real", bin_dir=bin_dir,
                                     tie_to_parent=True, pause_image=pause))
pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
       "spec": {"nodeSelector": {"tandem.dev/node-kind": "real"},
                "containers": [{"name": "p", "image": "registry.k8s.io/pause:3.10",
                                "imagePullPolicy": "Never"}]}}
cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
cluster.kubectl("wait", "--for=condition=Ready", "pod/p", "--timeout=120s")
print("ready", flush=True)
time.sleep(3600)
"""


def _machine() -> Json:
    """What a real node changes on the machine, to compare before and after."""
    return {
        "ip_forward": host.read_ip_forward(),
        "links": sorted(os.listdir("/sys/class/net")),
        "cgroups": [str(p) for p in host.existing_cgroups(CGROUP)],
        "iptables": {binary: _rules(binary) for binary in ("iptables", "ip6tables")},
        "shared": {str(d): sorted(host.list_tree(d)) if d.exists() else None for d in SHARED_DIRS},
    }


def _rules(binary: str) -> list[str]:
    """Tables, chains (without their packet counters) and rules of ``BINARY-save``."""
    out = subprocess.run([f"{binary}-save"], capture_output=True, text=True, check=False).stdout
    lines = [line for line in out.splitlines() if line.startswith((":", "-A", "*"))]
    return [" ".join(line.split()[:2]) if line.startswith(":") else line for line in lines]


def _assert_recorded_clean(state: ClusterState, *, machine: bool = True) -> None:
    """The machine's record and the node directory's copy say: nothing left."""
    assert state.real_node is not None
    paths = [state.real_node.plan.inventory_copy] + [INVENTORY_FILE] * machine
    for path in paths:
        inventory = load_inventory(path)
        assert inventory is not None and inventory.root == state.real_node.plan.root, path
        assert inventory.clean, path


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@contextlib.contextmanager
def _owner(
    state_dir: Path, images: dict[str, BuiltImage], binaries: ClusterBinaries
) -> Iterator[tuple[subprocess.Popen[str], ClusterState]]:
    argv = [sys.executable, "-c", OWNER, str(state_dir), str(images[PAUSE_IMAGE].archive)]
    proc = subprocess.Popen([*argv, str(binaries.bin_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        state = ClusterState.model_validate_json((state_dir / "state.json").read_text())
        yield proc, state
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=30)


def _node_footprint(state: ClusterState) -> tuple[set[int], list[str]]:
    """The node's live processes (kubelet, containerd, shims, containers) and its mount
    points (one entry per mount)."""
    assert state.real_node is not None
    pids = set().union(*(host.pids_in_tree(c) for c in host.existing_cgroups(CGROUP)))
    return pids, host.mounts_under(Path(state.real_node.plan.runtime_root))


def test_a_killed_owner_leaves_nothing_of_the_node_behind(
    real_node_slot: Any,
    built_images: dict[str, BuiltImage],
    cluster_binaries: ClusterBinaries,
    tmp_path: Path,
) -> None:
    real_node_slot.release()  # this test needs the machine's one real node
    before = _machine()
    with _owner(tmp_path, built_images, cluster_binaries) as (owner, state):
        assert state.real_node is not None
        pids, mounts = _node_footprint(state)
        names = {Path(f"/proc/{p}/comm").read_text().strip() for p in pids if _alive(p)}
        assert {"kubelet", "containerd", "containerd-shim", "pause"} <= names, names
        kinds = {m.split("/")[-1] if "netns" not in m else "netns" for m in mounts}
        assert {"rootfs", "shm", "netns", "kubelet"} <= kinds, mounts
        control_plane = [p.pid for p in state.processes]
        owner.send_signal(signal.SIGKILL)  # no cleanup code of the owner runs
        supervisor = state.real_node.supervisor.pid
        wait_until(lambda: not _alive(supervisor), timeout_s=60, what="the supervisor's exit")
    assert [p for p in (*pids, *control_plane) if _alive(p)] == []
    assert host.mounts_under(Path(state.real_node.plan.runtime_root)) == []
    after = _machine()
    assert after == before
    assert BRIDGE not in after["links"] and after["cgroups"] == []
    ours = (*KUBELET_CHAINS, *GUARD_CHAINS)
    assert not [
        r for rules in after["iptables"].values() for r in rules if any(c in r for c in ours)
    ]
    assert current_holder(LOCK_FILE) is None
    _assert_recorded_clean(state)


def test_what_a_killed_node_left_is_removed_when_the_next_one_starts(
    real_node_slot: Any,
    built_images: dict[str, BuiltImage],
    cluster_binaries: ClusterBinaries,
    tmp_path: Path,
) -> None:
    real_node_slot.release()
    with _owner(tmp_path, built_images, cluster_binaries) as (owner, state):
        assert state.real_node is not None
        # Kill the supervisor first: nothing is left to clean up, as after a power cut of
        # the Python side. Kubelet, containerd, shims and containers keep running.
        supervisor = state.real_node.supervisor.pid
        os.kill(supervisor, signal.SIGKILL)
        owner.send_signal(signal.SIGKILL)
        wait_until(lambda: not _alive(supervisor), timeout_s=30, what="the supervisor's exit")
    pids, mounts = _node_footprint(state)
    assert pids and mounts  # the leftovers
    assert all(_alive(p) for p in pids)

    cluster = real_node_slot.get(with_images=False)  # the next real node on this machine
    assert [p for p in pids if _alive(p)] == []
    # Every mount path but the kubelet root's holds a container, sandbox or pod id: none
    # of the old ones is left, and the kubelet root is mounted once (the new node's).
    now = host.mounts_under(Path(state.real_node.plan.runtime_root))
    kubelet_root = str(state.real_node.plan.kubelet_root)
    assert mounts.count(kubelet_root) == 1 and now.count(kubelet_root) == 1
    assert set(mounts) & set(now) == {kubelet_root}
    _assert_recorded_clean(state, machine=False)  # the machine's record is the new node's
    assert cluster.ready_node_count() == len(_get(cluster, "nodes")["items"])


def test_cli_up_import_down_with_a_real_node(
    real_node_slot: Any,
    built_images: dict[str, BuiltImage],
    cluster_binaries: ClusterBinaries,
    tmp_path: Path,
) -> None:
    """The detached flow of the README: the node outlives `up`; `down` tears it down."""
    real_node_slot.release()
    before = _machine()
    cli = [sys.executable, "-m", "tandem.cli.main", "dev", "cluster"]
    where = ["--state-dir", str(tmp_path / "state")]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*cli, *args, *where], capture_output=True, text=True, timeout=300, check=False
        )

    pause = str(built_images[PAUSE_IMAGE].archive)
    up = run("up", "--nodes", "real", "--pause-image", pause)
    try:
        assert up.returncode == 0, up.stderr
        kubeconfig = up.stdout.strip()
        status = run("status")
        assert status.returncode == 0, status.stdout
        assert "real node:  localhost (ready)" in status.stdout
        # The pause image is in already; importing it again is cheap and says the same.
        imported = run("import", pause)
        assert imported.returncode == 0, imported.stderr
        assert imported.stdout.strip() == f"imported {pause}"
        state = ClusterState.model_validate_json((tmp_path / "state" / "state.json").read_text())
        assert state.real_node is not None
        ctr = [
            state.real_node.plan.tools.ctr,
            "--address",
            str(state.real_node.plan.containerd_socket),
        ]
        images = subprocess.run(
            [*ctr, "-n", "k8s.io", "images", "list", "-q"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert PAUSE_IMAGE in images
        nodes = subprocess.run(
            [
                str(cluster_binaries.kubectl),
                f"--kubeconfig={kubeconfig}",
                "get",
                "nodes",
                "-l",
                "tandem.dev/node-kind=real",
                "-o",
                "name",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.split()
        assert nodes == ["node/localhost"]
    finally:
        down = run("down")
    assert down.returncode == 0, down.stderr
    assert not _alive(state.real_node.supervisor.pid)
    assert _machine() == before
    _assert_recorded_clean(state)
