"""What one real node is made of: names, addresses, ports and paths (pure data).

The plan is written to ``plan.json`` by the process that asks for a node and read by the
node's supervisor (:mod:`tandem.devcluster.realnode.supervisor`), so both agree on every
path without sharing memory. Configs and logs live in ``root`` (the cluster's state
directory); what the node's processes fill and mount at run time lives in
``runtime_root``, a fixed directory of the machine (there is one real node per machine):
a crashed test session's temporary directory can be renamed or deleted by the next
session, mounts and all, and cleanup must still find every mount by its path. What
containerd 1.6 and the kubelet always put elsewhere (``SHARED_DIRS``) is snapshotted in
the inventory before it is touched.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from tandem.devcluster.components import SERVICE_CIDR
from tandem.devcluster.processes import ProcessRecord

# The kubelet refuses a loopback node IP, and the API server reaches a kubelet through the
# node's Hostname address: "localhost" resolves to 127.0.0.1 on every machine.
NODE_NAME = "localhost"
# Pods of the real node select it with this label (simulated nodes never carry it).
NODE_KIND_LABEL = "tandem.dev/node-kind"
NODE_KIND_REAL = "real"
# A pod network that exists only on this machine: one bridge, one /24, no route off it.
BRIDGE = "tandem0"
POD_CIDR = "10.213.7.0/24"
CNI_NETWORK = "tandem-realnode"
# The cgroup (in every hierarchy) holding the daemons, the shims and the kubelet's
# kubepods tree: cleanup kills and removes exactly this subtree.
CGROUP = "tandem-realnode"
# One real node per machine: containerd 1.6 always uses /run/containerd/{s,fifo,runc},
# the node is named "localhost", and the kubelet owns iptables chains with fixed names.
LOCK_FILE = Path("/run/tandem/realnode.lock")
# The inventory of the machine's real node (what it made), next to the lock rather than in
# the node's directory alone: a crashed test session's temporary directory may be deleted
# by a later session before anyone cleans up after it. The node directory keeps a copy.
INVENTORY_FILE = Path("/run/tandem/realnode.inventory.json")
RUNTIME_ROOT = Path("/var/lib/tandem-realnode")
# Written outside ``root`` by containerd 1.6, the kubelet or libcni whatever their config
# says; the inventory snapshots them so cleanup removes only what this node added.
SHARED_DIRS = (Path("/run/containerd"), Path("/var/lib/cni"), Path("/var/log/containers"))
# iptables chains the kubelet creates (filter, nat, mangle; IPv4 and IPv6) and ours.
KUBELET_CHAINS = ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT")
# Ours: nothing forwarded to or from the bridge, nothing from elsewhere to the pod network,
# and the `kubernetes` Service address led to the API server proxy (no kube-proxy here).
FORWARD_GUARD = "TANDEM-REALNODE-FWD"
INPUT_GUARD = "TANDEM-REALNODE-IN"
API_DNAT = "TANDEM-REALNODE-API"
GUARD_CHAINS = (FORWARD_GUARD, INPUT_GUARD, API_DNAT)
# In-cluster clients dial the `kubernetes` Service, 10.96.0.1:443; a socat on the bridge
# address relays to the API server, which listens on 127.0.0.1 only.
KUBERNETES_SERVICE_IP = str(ipaddress.ip_network(SERVICE_CIDR)[1])
API_PROXY_PORT = 6443
IPTABLES = ("iptables", "ip6tables")
IPTABLES_TABLES = ("filter", "nat", "mangle", "raw")
SANDBOX_IMAGE = "registry.k8s.io/pause:3.10"


class HostTools(BaseModel):
    """The Debian-packaged programs the node runs (scripts/install-host-packages.sh)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    containerd: str = "/usr/bin/containerd"
    ctr: str = "/usr/bin/ctr"
    runc: str = "/usr/sbin/runc"
    socat: str = "/usr/bin/socat"
    cni_bin_dir: str = "/usr/lib/cni"


class NodePlan(BaseModel):
    """Everything needed to start, find and tear down one real node."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    root: str
    runtime_root: str = str(RUNTIME_ROOT)
    kubelet: str
    tools: HostTools = HostTools()
    kubelet_port: int
    kubelet_healthz_port: int
    # The API server's port on 127.0.0.1.
    api_port: int
    # Client credentials of the kubelet (system:node:localhost) and the cluster CA.
    api_kubeconfig: str
    # The cluster DNS: CoreDNS's binary and its client credentials (tandem.devcluster.dns).
    coredns: str
    dns_kubeconfig: str
    ca_cert: str
    # The kubelet's serving certificate, signed by the cluster CA for localhost.
    serving_cert: str
    serving_key: str
    pause_archive: str
    pod_cidr: str = POD_CIDR
    bridge: str = BRIDGE
    cgroup: str = CGROUP
    node_name: str = NODE_NAME

    @property
    def gateway(self) -> str:
        """The bridge's address: the first host of the pod CIDR (also the node IP)."""
        return str(next(ipaddress.ip_network(self.pod_cidr).hosts()))

    @property
    def prefix_len(self) -> int:
        return ipaddress.ip_network(self.pod_cidr).prefixlen

    # Configs, logs and records, under root.
    def _path(self, *parts: str) -> Path:
        return Path(self.root).joinpath(*parts)

    # What the processes fill and mount, under runtime_root.
    def _runtime(self, *parts: str) -> Path:
        return Path(self.runtime_root).joinpath(*parts)

    @property
    def plan_file(self) -> Path:
        return self._path("plan.json")

    @property
    def inventory_copy(self) -> Path:
        return self._path("inventory.json")

    @property
    def status_file(self) -> Path:
        return self._path("supervisor-status.json")

    @property
    def logs_dir(self) -> Path:
        return self._path("logs")

    @property
    def containerd_config(self) -> Path:
        return self._path("containerd.toml")

    @property
    def containerd_socket(self) -> Path:
        return self._runtime("containerd.sock")

    @property
    def containerd_root(self) -> Path:
        return self._runtime("containerd", "root")

    @property
    def containerd_state(self) -> Path:
        return self._runtime("containerd", "state")

    @property
    def runc_root(self) -> Path:
        return self._runtime("runc")

    @property
    def cni_conf_dir(self) -> Path:
        return self._path("cni", "net.d")

    @property
    def cni_ipam_dir(self) -> Path:
        return self._runtime("cni-ipam")

    @property
    def kubelet_config(self) -> Path:
        return self._path("kubelet.yaml")

    @property
    def corefile(self) -> Path:
        return self._path("Corefile")

    @property
    def kubelet_root(self) -> Path:
        return self._runtime("kubelet")

    @property
    def pod_logs_dir(self) -> Path:
        return self._runtime("pod-logs")

    def cgroup_path(self, *children: str) -> str:
        """A cgroup path relative to a hierarchy root, e.g. ``/tandem-realnode/shims``."""
        return "/" + "/".join((self.cgroup, *children))


class RealNodeRecord(BaseModel):
    """What the cluster's state file keeps about its real node."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plan: NodePlan
    supervisor: ProcessRecord
