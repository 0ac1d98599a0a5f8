"""A real node for the dev cluster: the kubelet built from k8s.io/kubernetes and Debian's
containerd + runc + CNI plugins, on this machine, as node ``localhost``.

Pure pieces: :mod:`plan` (names, addresses, paths), :mod:`configs` (containerd, CNI and
kubelet configs, command lines), :mod:`inventory` (what is ours). I/O: :mod:`host`,
:mod:`teardown`, :mod:`lock`, :mod:`supervisor` (the process that owns the node) and
:mod:`node` (the handle the cluster and tests use).
"""

from tandem.devcluster.realnode.node import RealNode, RealNodeError, check_free, start_real_node
from tandem.devcluster.realnode.plan import (
    BRIDGE,
    NODE_KIND_LABEL,
    NODE_KIND_REAL,
    NODE_NAME,
    POD_CIDR,
    NodePlan,
    RealNodeRecord,
)

__all__ = [
    "BRIDGE",
    "NODE_KIND_LABEL",
    "NODE_KIND_REAL",
    "NODE_NAME",
    "POD_CIDR",
    "NodePlan",
    "RealNode",
    "RealNodeError",
    "RealNodeRecord",
    "check_free",
    "start_real_node",
]
