"""The NetworkPolicy in front of an InferenceCluster's workers (pure).

Workers accept connections only from pods of their own cluster in their own namespace:
its frontends (gRPC) and its other workers (gRPC, the TCP KV port, NIXL/UCX, whose ports
UCX picks at run time, hence all ports). Optionally, the workers' read-only HTTP side
port (``/metrics``, the probes) from peers the platform names, e.g. Prometheus
(``--worker-metrics-from``). The kubelet's probes come from the node, which NetworkPolicy
always allows.

A policy is only as good as the CNI that enforces it; where none does, mutual TLS
(``credentials.py``) still decides who is served (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tandem.api.v1alpha1 import PoolRole
from tandem_operator import names

Manifest = dict[str, Any]

API_VERSION = "networking.k8s.io/v1"


def _cluster_pods(cluster: str, roles: Sequence[str]) -> Manifest:
    return {
        "matchLabels": {names.LABEL_CLUSTER: cluster},
        "matchExpressions": [{"key": names.LABEL_ROLE, "operator": "In", "values": list(roles)}],
    }


def render_worker_network_policy(
    meta: Manifest, cluster: str, metrics_from: Sequence[Manifest] = ()
) -> Manifest:
    """``meta``: the policy's metadata (name, namespace, labels, owner)."""
    workers = [r.value for r in PoolRole]
    ingress: list[Manifest] = [
        {"from": [{"podSelector": _cluster_pods(cluster, [names.FRONTEND, *workers])}]}
    ]
    if metrics_from:  # an empty "from" would mean "from anywhere": only with peers named
        ingress.append(
            {
                "from": list(metrics_from),
                "ports": [{"protocol": "TCP", "port": names.WORKER_HTTP_PORT}],
            }
        )
    return {
        "apiVersion": API_VERSION,
        "kind": "NetworkPolicy",
        "metadata": meta,
        "spec": {
            "podSelector": _cluster_pods(cluster, workers),
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }
