"""The cluster DNS of the dev cluster's real node: CoreDNS (tests/dns/build-coredns.sh)
answering for ``cluster.local`` from the API server, so that pods resolve Services and the
members of a LeaderWorkerSet group (``<lws>-<group>.<lws>.<namespace>``, the address a
multi-node launcher dials) as on any cluster (pure: paths and names in, files and objects
out).

It runs as a host process of the node, listening on the bridge address (the one address
pods reach), and the kubelet gives pods that address as their nameserver. It serves
``cluster.local`` and nothing else: a query for any other name is refused, never forwarded,
so no pod traffic leaves the machine. It reads Services, EndpointSlices and Namespaces as
its own user (a line of the token file), bound to a ClusterRole of exactly those reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tandem.devcluster.binaries import find_bin_dir

CLUSTER_DOMAIN = "cluster.local"
USER = "tandem:cluster-dns"
ROLE = "tandem:cluster-dns"
BINARY = "coredns"
BIN_ENV = "TANDEM_COREDNS_BIN"

Json = dict[str, Any]


class CoreDnsBuildMissingError(RuntimeError):
    """tests/dns/build-coredns.sh has not been run; the message says how to run it."""


def locate_coredns(bin_dir: Path | None = None) -> Path:
    """The CoreDNS binary: in ``bin_dir``, else $TANDEM_COREDNS_BIN, else tests/dns/bin."""
    bin_dir = bin_dir or find_bin_dir(BIN_ENV, "dns")
    binary = None if bin_dir is None else bin_dir / BINARY
    if binary is None or not binary.is_file():
        where = "no checkout found" if bin_dir is None else f"no {BINARY} in {bin_dir}"
        raise CoreDnsBuildMissingError(
            f"the real node's cluster DNS is not built ({where}): run `make dns-build` "
            f"(tests/dns/build-coredns.sh), or set {BIN_ENV}"
        )
    return binary


def render_rbac() -> list[Json]:
    """What the kubernetes plugin reads (list and watch), and nothing more."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": ROLE},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["services", "namespaces"],
                "verbs": ["list", "watch"],
            },
            {
                "apiGroups": ["discovery.k8s.io"],
                "resources": ["endpointslices"],
                "verbs": ["list", "watch"],
            },
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
    }
    return [role, binding]


def render_corefile(address: str, kubeconfig: str) -> str:
    """One server: ``cluster.local`` on ``address``:53 from the API server; every other
    zone has no server here, so CoreDNS refuses it."""
    return (
        f"{CLUSTER_DOMAIN}:53 {{\n"
        f"    bind {address}\n"
        f"    kubernetes {CLUSTER_DOMAIN} {{\n"
        f"        kubeconfig {kubeconfig}\n"
        "    }\n"
        "    errors\n"
        "}\n"
    )
