"""The NetworkPolicies in front of an InferenceCluster's workers and frontends (pure).

Workers accept connections only from pods of their own cluster in their own namespace:
its frontends (gRPC) and its other workers (gRPC, the TCP KV port, NIXL/UCX, whose ports
UCX picks at run time, hence all ports). Where a pool's workers are Ray groups
(``multinode``), the block of ports Ray listens on is taken out of that and opened to the
pods of those pools alone: a frontend, or a worker of a one-node pool, cannot reach a
Ray head (which also asks for the cluster's token). Optionally, the workers' read-only HTTP side
port (``/metrics``, the probes) from peers the platform names, e.g. Prometheus
(``--worker-metrics-from``). The kubelet's probes come from the node, which NetworkPolicy
always allows.

Frontends accept their API port from anywhere (API keys decide who is served) and their
metrics port (``/metrics`` alone, apart from the API) only from the operator's pods,
which read the routers' load from it, and the ``--worker-metrics-from`` peers.

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

# The chart's labels on the operator's pods (charts/tandem/templates/_helpers.tpl,
# tandem.selectorLabels without the release's instance).
OPERATOR_POD_LABELS = {names.LABEL_NAME: "tandem", names.LABEL_COMPONENT: "operator"}
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set on every namespace


def operator_peer(namespace: str) -> Manifest:
    """The NetworkPolicyPeer of the operator's pods, running in ``namespace``."""
    return {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}},
        "podSelector": {"matchLabels": dict(OPERATOR_POD_LABELS)},
    }


def _cluster_pods(cluster: str, roles: Sequence[str]) -> Manifest:
    return {
        "matchLabels": {names.LABEL_CLUSTER: cluster},
        "matchExpressions": [{"key": names.LABEL_ROLE, "operator": "In", "values": list(roles)}],
    }


def render_worker_network_policy(
    meta: Manifest,
    cluster: str,
    metrics_from: Sequence[Manifest] = (),
    ray_roles: Sequence[str] = (),
    ray_ports: range = range(0),
) -> Manifest:
    """``meta``: the policy's metadata (name, namespace, labels, owner). ``ray_roles``:
    the pools whose workers are Ray groups; their Ray ports (``ray_ports``) are open to
    those pools' own pods only, every other port as for any worker."""
    workers = [r.value for r in PoolRole]
    peers: Manifest = {
        "from": [{"podSelector": _cluster_pods(cluster, [names.FRONTEND, *workers])}]
    }
    ingress: list[Manifest] = [peers]
    if ray_roles:
        peers["ports"] = [
            {"protocol": "TCP", "port": 1, "endPort": ray_ports.start - 1},
            {"protocol": "TCP", "port": ray_ports.stop, "endPort": 65535},
            {"protocol": "UDP"},
        ]
        ingress.append(
            {
                "from": [{"podSelector": _cluster_pods(cluster, list(ray_roles))}],
                "ports": [
                    {"protocol": "TCP", "port": ray_ports.start, "endPort": ray_ports.stop - 1}
                ],
            }
        )
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


def render_frontend_network_policy(
    meta: Manifest,
    cluster: str,
    api_port: int,
    metrics_from: Sequence[Manifest] = (),
    operator: Manifest | None = None,
) -> Manifest:
    """``meta``: the policy's metadata; ``operator``: the operator's peer (None when it
    runs outside the cluster and reads the frontends through a port-forward)."""
    ingress: list[Manifest] = [{"ports": [{"protocol": "TCP", "port": api_port}]}]
    scrapers = [*([operator] if operator else []), *metrics_from]
    if scrapers:  # an empty "from" would mean "from anywhere": only with peers named
        ingress.append(
            {
                "from": scrapers,
                "ports": [{"protocol": "TCP", "port": names.FRONTEND_METRICS_PORT}],
            }
        )
    return {
        "apiVersion": API_VERSION,
        "kind": "NetworkPolicy",
        "metadata": meta,
        "spec": {
            "podSelector": {"matchLabels": names.selector_labels(cluster, names.FRONTEND)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }
