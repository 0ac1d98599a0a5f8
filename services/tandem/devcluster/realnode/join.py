"""Joining a real node to a dev cluster: its plan from the cluster's files, the checks
before anything starts, and the wait until the API server lists it Ready."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from tandem.devcluster.binaries import ClusterBinaries
from tandem.devcluster.kubeconfig import write_kubeconfig
from tandem.devcluster.pki import KubeletPki, Pki
from tandem.devcluster.ports import allocate_ports
from tandem.devcluster.probes import wait_until
from tandem.devcluster.realnode.node import (
    RealNode,
    RealNodeError,
    check_free,
    check_root,
    start_real_node,
)
from tandem.devcluster.realnode.plan import NODE_NAME, NodePlan

# The kubelet's identity in --token-auth-file: the one the Node authorizer and
# NodeRestriction admission limit to this node and its pods.
NODE_USER = f"system:node:{NODE_NAME}"
NODE_GROUP = "system:nodes"


def plan_real_node(
    *,
    root: Path,
    kubelet: Path,
    api_url: str,
    pki: Pki,
    kubelet_pki: KubeletPki,
    node_token: str,
    dns_token: str,
    coredns: Path,
    pause_archive: Path,
) -> NodePlan:
    """The node's plan, and the kubelet's and the cluster DNS's client kubeconfigs
    written under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    kubeconfig = root / "kubelet.kubeconfig"
    write_kubeconfig(kubeconfig, server=api_url, ca_pem=pki.ca_cert.read_bytes(), token=node_token)
    dns_kubeconfig = root / "coredns.kubeconfig"
    write_kubeconfig(
        dns_kubeconfig, server=api_url, ca_pem=pki.ca_cert.read_bytes(), token=dns_token
    )
    port, healthz_port = allocate_ports(2)
    api_port = urlsplit(api_url).port
    if api_port is None:
        raise ValueError(f"no port in the API server URL {api_url}")
    return NodePlan(
        root=str(root),
        kubelet=str(kubelet),
        kubelet_port=port,
        kubelet_healthz_port=healthz_port,
        api_port=api_port,
        api_kubeconfig=str(kubeconfig),
        coredns=str(coredns),
        dns_kubeconfig=str(dns_kubeconfig),
        ca_cert=str(pki.ca_cert),
        serving_cert=str(kubelet_pki.serving_cert),
        serving_key=str(kubelet_pki.serving_key),
        pause_archive=str(pause_archive),
    )


def prepare_real_node(bins: ClusterBinaries, pause_image: Path | None) -> Path:
    """Check what a real node needs before anything starts; the pause image archive
    (``pause_image``, else the one ``make images`` builds, built now if needed)."""
    check_root()
    check_free()
    if not bins.path("kubelet").is_file():
        raise RealNodeError(f"no kubelet in {bins.bin_dir}: run `make cluster-build`")
    if pause_image is not None:
        if not pause_image.is_file():
            raise RealNodeError(f"pause image archive {pause_image} not found")
        return pause_image
    from tandem.devimages import PAUSE_IMAGE, ImageBuildError, ensure_images  # real nodes only

    try:
        return Path(ensure_images(["pause"])[PAUSE_IMAGE].archive)
    except ImageBuildError as err:
        raise RealNodeError(f"cannot build the pause image: {err}") from err


def join_real_node(
    plan: NodePlan,
    *,
    tie_to_parent: bool,
    deadline: float,
    on_spawn: Callable[[RealNode], None],
    get_node_json: Callable[[str], str | None],
) -> RealNode:
    """Start the node and wait until the API server lists it Ready."""
    node = start_real_node(
        plan, tie_to_parent=tie_to_parent, timeout_s=_left(deadline), on_spawn=on_spawn
    )
    wait_until(
        lambda: node_is_ready(get_node_json(node.name)),
        timeout_s=_left(deadline),
        what=f"node {node.name} Ready",
        abort=node.failure,
    )
    return node


def node_is_ready(node_json: str | None) -> bool:
    if not node_json:
        return False
    conditions = json.loads(node_json).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _left(deadline: float) -> float:
    return max(1.0, deadline - time.monotonic())
