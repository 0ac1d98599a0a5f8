"""The real node's configuration files and command lines (pure: a plan in, text out).

Each choice below was needed on these machines (``notes/real-node.md``): no
CAP_SYS_RESOURCE (``restrict_oom_score_adj``), cgroup v1 hierarchies (cgroupfs driver,
``failCgroupV1: false``), images imported rather than pulled (GC thresholds, the pause
image as sandbox image), and a pod network that cannot reach past this machine.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml

from tandem.devcluster.dns import CLUSTER_DOMAIN, render_corefile
from tandem.devcluster.realnode.plan import (
    API_DNAT,
    API_PROXY_PORT,
    CNI_NETWORK,
    FORWARD_GUARD,
    INPUT_GUARD,
    KUBERNETES_SERVICE_IP,
    NODE_KIND_LABEL,
    NODE_KIND_REAL,
    SANDBOX_IMAGE,
    NodePlan,
)

LOOPBACK = "127.0.0.1"
CRI = 'plugins."io.containerd.grpc.v1.cri"'
# containerd plugins the node does not use. "opt" would create /opt/containerd.
DISABLED_CONTAINERD_PLUGINS = (
    "io.containerd.internal.v1.opt",
    "io.containerd.snapshotter.v1.aufs",
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.tracing.processor.v1.otlp",
    "io.containerd.internal.v1.tracing",
)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML rendering for {value!r}")


def _toml(tables: Mapping[str, Mapping[str, object]]) -> str:
    """Tables of scalars to TOML; the "" table holds the top-level keys."""
    lines: list[str] = []
    for name, keys in tables.items():
        if name:
            lines.append(f"\n[{name}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in keys.items()]
    return "\n".join(lines).lstrip("\n") + "\n"


def render_containerd_config(plan: NodePlan) -> str:
    """containerd 1.6 config (version 2): own root, state, socket and runc root; the CRI
    plugin runs pods with runc under the node's cgroup and the node's CNI network."""
    runc = f"{CRI}.containerd.runtimes.runc"
    return _toml(
        {
            "": {
                "version": 2,
                "root": str(plan.containerd_root),
                "state": str(plan.containerd_state),
                "disabled_plugins": list(DISABLED_CONTAINERD_PLUGINS),
            },
            "grpc": {"address": str(plan.containerd_socket)},
            # containerd itself joins this cgroup (v1 hierarchies) at start.
            "cgroup": {"path": plan.cgroup_path("daemons")},
            CRI: {
                "sandbox_image": SANDBOX_IMAGE,
                # The sandbox asks for oom_score_adj -998, which needs CAP_SYS_RESOURCE.
                "restrict_oom_score_adj": True,
                # Network namespaces under the state dir, not /run/netns: cleanup finds
                # every one of ours there and nobody else's.
                "netns_mounts_under_state_dir": True,
                "stream_server_address": LOOPBACK,
                "stream_server_port": "0",
                "disable_tcp_service": True,
                "enable_selinux": False,
            },
            f"{CRI}.containerd": {"snapshotter": "overlayfs", "default_runtime_name": "runc"},
            runc: {"runtime_type": "io.containerd.runc.v2"},
            f"{runc}.options": {
                "BinaryName": plan.tools.runc,
                "Root": str(plan.runc_root),
                "SystemdCgroup": False,
                # Every shim in one cgroup, so cleanup finds them after a crash.
                "ShimCgroup": plan.cgroup_path("shims"),
            },
            f"{CRI}.cni": {
                "bin_dir": plan.tools.cni_bin_dir,
                "conf_dir": str(plan.cni_conf_dir),
                "max_conf_num": 1,
            },
        }
    )


def render_cni_conflist(plan: NodePlan) -> dict[str, Any]:
    """One bridge on one /24 that exists only here, nothing masqueraded, no default
    route: pods reach their /24 and, through the bridge, the one address of the
    `kubernetes` Service, which the host answers itself (``render_iptables_rules``)."""
    return {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": plan.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": plan.pod_cidr, "gateway": plan.gateway}]],
                    "routes": [{"dst": f"{KUBERNETES_SERVICE_IP}/32"}],
                    "dataDir": str(plan.cni_ipam_dir),
                },
            }
        ],
    }


def render_kubelet_config(plan: NodePlan) -> dict[str, Any]:
    """KubeletConfiguration: API and healthz on 127.0.0.1 only, clients authenticated by
    a certificate of the cluster CA (only the API server holds one)."""
    endpoint = f"unix://{plan.containerd_socket}"
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": LOOPBACK,
        "port": plan.kubelet_port,
        "readOnlyPort": 0,
        "healthzBindAddress": LOOPBACK,
        "healthzPort": plan.kubelet_healthz_port,
        "tlsCertFile": plan.serving_cert,
        "tlsPrivateKeyFile": plan.serving_key,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": plan.ca_cert},
        },
        # Authentication already limits callers to the API server's client certificate.
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": endpoint,
        "imageServiceEndpoint": endpoint,
        "cgroupDriver": "cgroupfs",
        # kubepods goes under the node's own cgroup, not the hierarchy roots.
        "cgroupRoot": plan.cgroup_path(),
        "failCgroupV1": False,
        "failSwapOn": False,
        "podLogsDir": str(plan.pod_logs_dir),
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "2%",
            "imagefs.available": "2%",
        },
        # Images are imported, never pulled: garbage collection would lose them for good.
        "imageGCHighThresholdPercent": 99,
        "imageGCLowThresholdPercent": 98,
        "maxPods": 50,
        "registerNode": True,
        "serializeImagePulls": False,
        # Pods resolve cluster names through the node's CoreDNS (tandem.devcluster.dns).
        "clusterDNS": [plan.gateway],
        "clusterDomain": CLUSTER_DOMAIN,
        # Mounted Secrets and ConfigMaps are refreshed on each pod sync: every 10 s instead
        # of the default minute, so an API key added to its Secret works within seconds
        # here (a handful of pods: the extra syncs cost the node nothing it notices).
        "syncFrequency": "10s",
    }


IptablesRule = tuple[str, tuple[str, ...]]  # (table, arguments of iptables -t TABLE)


def render_iptables_rules(plan: NodePlan) -> tuple[IptablesRule, ...]:
    """Our chains, in the order to create them (IPv4; pods have no IPv6 address).

    - FORWARD: nothing between the bridge and any other interface, whatever ip_forward
      says (the bridge plugin turns it on): pod traffic cannot leave the machine.
    - INPUT: nothing from another interface to the pod network's addresses.
    - PREROUTING: the `kubernetes` Service address, dialled from the bridge, goes to the
      API server proxy on the bridge address (there is no kube-proxy)."""
    br = plan.bridge
    api = f"{KUBERNETES_SERVICE_IP}/32"
    proxy = f"{plan.gateway}:{API_PROXY_PORT}"
    return (
        ("filter", ("-N", FORWARD_GUARD)),
        ("filter", ("-A", FORWARD_GUARD, "-i", br, "!", "-o", br, "-j", "DROP")),
        ("filter", ("-A", FORWARD_GUARD, "!", "-i", br, "-o", br, "-j", "DROP")),
        ("filter", ("-I", "FORWARD", "1", "-j", FORWARD_GUARD)),
        ("filter", ("-N", INPUT_GUARD)),
        ("filter", ("-A", INPUT_GUARD, "-i", br, "-j", "RETURN")),
        ("filter", ("-A", INPUT_GUARD, "-i", "lo", "-j", "RETURN")),
        ("filter", ("-A", INPUT_GUARD, "-d", plan.pod_cidr, "-j", "DROP")),
        ("filter", ("-I", "INPUT", "1", "-j", INPUT_GUARD)),
        ("nat", ("-N", API_DNAT)),
        ("nat", ("-A", API_DNAT, "-i", br, "-d", api, "-p", "tcp", "--dport", "443",
                 "-j", "DNAT", "--to-destination", proxy)),
        ("nat", ("-I", "PREROUTING", "1", "-j", API_DNAT)),
    )  # fmt: skip


def api_proxy_argv(plan: NodePlan) -> tuple[str, ...]:
    """socat on the bridge address relaying to the API server on 127.0.0.1."""
    listen = f"TCP-LISTEN:{API_PROXY_PORT},bind={plan.gateway},fork,reuseaddr"
    return (plan.tools.socat, listen, f"TCP:127.0.0.1:{plan.api_port}")


def coredns_argv(plan: NodePlan) -> tuple[str, ...]:
    return (plan.coredns, "-conf", str(plan.corefile))


def containerd_argv(plan: NodePlan) -> tuple[str, ...]:
    return (plan.tools.containerd, f"--config={plan.containerd_config}")


def kubelet_argv(plan: NodePlan) -> tuple[str, ...]:
    return (
        plan.kubelet,
        f"--config={plan.kubelet_config}",
        f"--kubeconfig={plan.api_kubeconfig}",
        f"--root-dir={plan.kubelet_root}",
        f"--hostname-override={plan.node_name}",
        # The bridge address, which only this machine has: the kubelet refuses loopback.
        f"--node-ip={plan.gateway}",
        f"--node-labels={NODE_KIND_LABEL}={NODE_KIND_REAL}",
    )


def render_files(plan: NodePlan) -> dict[str, str]:
    """Every config file of the node, by path."""
    conflist = plan.cni_conf_dir / "10-tandem.conflist"
    return {
        str(plan.containerd_config): render_containerd_config(plan),
        str(conflist): json.dumps(render_cni_conflist(plan), indent=2) + "\n",
        str(plan.kubelet_config): yaml.safe_dump(render_kubelet_config(plan), sort_keys=False),
        str(plan.corefile): render_corefile(plan.gateway, plan.dns_kubeconfig),
    }
