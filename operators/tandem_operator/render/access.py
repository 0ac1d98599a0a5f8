"""What the frontend may do with the Kubernetes API, rendered per InferenceCluster.

The frontend finds its workers by watching the EndpointSlices of the pools' Services
(``tandem.router.endpoint_slices``). That is the only API access any data-plane pod has:
its own ServiceAccount, bound to a Role in the cluster's namespace that allows ``list``
and ``watch`` on ``discovery.k8s.io/endpointslices`` and nothing else. (``resourceNames``
cannot narrow a label-selected list or watch, so the Role is per namespace.) Workers keep
``automountServiceAccountToken: false``.

The operator may only grant what it holds itself (RBAC escalation prevention): its
ClusterRole includes the same two verbs on endpointslices.
"""

from __future__ import annotations

from typing import Any

Manifest = dict[str, Any]

RBAC_API_VERSION = "rbac.authorization.k8s.io/v1"
FRONTEND_RULES: list[Manifest] = [
    {
        "apiGroups": ["discovery.k8s.io"],
        "resources": ["endpointslices"],
        "verbs": ["list", "watch"],
    }
]


def render_frontend_access(meta: Manifest) -> list[Manifest]:
    """ServiceAccount, Role and RoleBinding of a cluster's frontend; all three carry
    ``meta`` (name, namespace, labels, owner) and so share the frontend's name."""
    name = meta["name"]
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": meta,
            # Mounted explicitly by the frontend pod only (see pods.py).
            "automountServiceAccountToken": False,
        },
        {"apiVersion": RBAC_API_VERSION, "kind": "Role", "metadata": meta, "rules": FRONTEND_RULES},
        {
            "apiVersion": RBAC_API_VERSION,
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": meta["namespace"]}],
        },
    ]
