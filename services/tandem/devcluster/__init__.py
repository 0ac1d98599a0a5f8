"""A real Kubernetes control plane on 127.0.0.1 for tests and local development.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok run as plain
processes (built from Go modules by tests/cluster/build.sh); kwok simulates GPU nodes so
pods the real scheduler binds become Running without containers. The ``real`` profile adds
a real node (kubelet + containerd on this machine, :mod:`tandem.devcluster.realnode`);
``with_lws`` the LeaderWorkerSet controller (:mod:`tandem.devcluster.lws`).

    cluster = start_cluster(StartOptions(state_dir=Path("/tmp/dc"), profile="default"))
    cluster.kubectl("get", "nodes")
    cluster.stop()
"""

from tandem.devcluster.binaries import BinariesMissingError, find_build_script, locate_binaries
from tandem.devcluster.cluster import (
    DevCluster,
    DevClusterError,
    ProcessStatus,
    StartOptions,
    open_cluster,
    start_cluster,
    stop_cluster,
)
from tandem.devcluster.layout import default_state_dir
from tandem.devcluster.nodes import PROFILES, NodeProfile, get_profile, render_profile
from tandem.devcluster.realnode import RealNode, RealNodeError

__all__ = [
    "PROFILES",
    "BinariesMissingError",
    "DevCluster",
    "DevClusterError",
    "NodeProfile",
    "ProcessStatus",
    "RealNode",
    "RealNodeError",
    "StartOptions",
    "default_state_dir",
    "find_build_script",
    "get_profile",
    "locate_binaries",
    "open_cluster",
    "render_profile",
    "start_cluster",
    "stop_cluster",
]
