"""A LeaderWorkerSet group of real pods on the real node, reconciled by the real LWS
controller (sigs.k8s.io/lws, built by tests/lws/build-lws.sh and started by the dev
cluster): the leader and its worker run and become Ready, the LeaderWorkerSet counts the
group ready, its webhooks defaulted the object and labelled the pods, the worker resolves
its leader's name through the node's cluster DNS (CoreDNS), and deleting the worker
restarts the whole group (restart policy RecreateGroupOnPodRestart).

Needs root (the real node).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tandem.devcluster import DevCluster
from tandem.devcluster.probes import wait_until
from tandem.devimages import TANDEM_IMAGE

pytestmark = pytest.mark.k8s

WAIT_S = 60.0
NAMESPACE_PREFIX = "lws"  # real_node_namespace names its namespaces so
HTTP_PORT = 8080
NAME = "group"
SET_LABEL = "leaderworkerset.sigs.k8s.io/name"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"

Json = dict[str, Any]


def _leader_worker_set() -> Json:
    """One group of two pods (leader + one worker), each Python's http.server from the
    Tandem image (entrypoint ``python -m``) with a readiness probe on it."""
    pod = {
        "spec": {
            "nodeSelector": {"tandem.dev/node-kind": "real"},
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": TANDEM_IMAGE,
                    "imagePullPolicy": "Never",
                    "args": ["http.server", str(HTTP_PORT)],
                    "readinessProbe": {
                        "httpGet": {"path": "/", "port": HTTP_PORT},
                        "periodSeconds": 1,
                    },
                    "resources": {"limits": {"memory": "64Mi"}},
                }
            ],
        }
    }
    # No restartPolicy: LWS's default, RecreateGroupOnPodRestart, applies.
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": NAME},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": pod}},
    }


def _get(cluster: DevCluster, *args: str) -> Json:
    out: Json = json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)
    return out


def _group_pods(cluster: DevCluster, namespace: str) -> dict[str, Json]:
    """The group's pods by worker index ("0" is the leader)."""
    pods = _get(cluster, "pods", "-n", namespace, "-l", f"{SET_LABEL}={NAME}")["items"]
    return {p["metadata"]["labels"][WORKER_INDEX_LABEL]: p for p in pods}


def _uids(cluster: DevCluster, namespace: str) -> set[str]:
    return {p["metadata"]["uid"] for p in _group_pods(cluster, namespace).values()}


def _ready(pod: Json) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return pod["status"].get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in conditions
    )


def _group_ready(cluster: DevCluster, namespace: str) -> bool:
    lws = _get(cluster, "leaderworkerset", NAME, "-n", namespace)
    pods = _group_pods(cluster, namespace)
    return (
        lws.get("status", {}).get("readyReplicas") == 1
        and set(pods) == {"0", "1"}
        and all(_ready(p) and p["metadata"].get("deletionTimestamp") is None for p in pods.values())
    )


def test_group_of_real_pods_becomes_ready_and_restarts_as_a_unit(
    real_node_cluster: DevCluster, real_node_namespace: str
) -> None:
    cluster = real_node_cluster
    documents = json.dumps(_leader_worker_set())
    cluster.kubectl("apply", "-n", real_node_namespace, "-f", "-", input=documents)
    wait_until(
        lambda: _group_ready(cluster, real_node_namespace), timeout_s=WAIT_S, what="the group Ready"
    )

    lws = _get(cluster, "leaderworkerset", NAME, "-n", real_node_namespace)
    assert lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    pods = _group_pods(cluster, real_node_namespace)
    assert {i: p["metadata"]["name"] for i, p in pods.items()} == {
        "0": NAME + "-0",
        "1": NAME + "-0-1",
    }
    for pod in pods.values():
        assert pod["spec"]["nodeName"] == "localhost"  # the real node, not a simulated one
        # The pod webhook tells every pod of the group where its leader is.
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
        assert env["LWS_LEADER_ADDRESS"] == f"{NAME}-0.{NAME}.{real_node_namespace}"
        assert env["LWS_GROUP_SIZE"] == "2"
    # The node's cluster DNS answers that name with the leader's pod IP (a launcher dials
    # it before the leader is ready: the group's headless Service publishes not-ready
    # pods), and refuses a name outside the cluster instead of sending it anywhere.
    lookup = (
        "import os, socket\n"
        "print(socket.gethostbyname(os.environ['LWS_LEADER_ADDRESS']))\n"
        "try:\n    socket.gethostbyname('example.com')\nexcept OSError:\n    print('refused')\n"
    )
    answer = cluster.kubectl(
        "exec", "-n", real_node_namespace, f"{NAME}-0-1", "--", "python", "-c", lookup
    ).stdout.split()
    assert answer == [pods["0"]["status"]["podIP"], "refused"]

    before = _uids(cluster, real_node_namespace)
    cluster.kubectl("delete", "pod", f"{NAME}-0-1", "-n", real_node_namespace, "--wait=false")
    # The whole group is recreated: a new leader too, not only the deleted worker.
    wait_until(
        lambda: (
            _group_ready(cluster, real_node_namespace)
            and not before & _uids(cluster, real_node_namespace)
        ),
        timeout_s=WAIT_S,
        what="the group recreated and Ready again",
    )
