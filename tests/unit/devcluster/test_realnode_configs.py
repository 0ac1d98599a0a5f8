"""The real node's configs are pure renderings: check what the node depends on
(notes/real-node.md) and that nothing in them reaches past the machine."""

from __future__ import annotations

import ipaddress
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tandem.devcluster.realnode.configs import (
    api_proxy_argv,
    containerd_argv,
    coredns_argv,
    kubelet_argv,
    render_cni_conflist,
    render_containerd_config,
    render_files,
    render_iptables_rules,
    render_kubelet_config,
)
from tandem.devcluster.realnode.plan import NODE_KIND_LABEL, SANDBOX_IMAGE, NodePlan

ROOT = "/state/realnode"
RUN = "/var/lib/tandem-realnode"
PLAN = NodePlan(
    root=ROOT,
    kubelet="/bin-dir/kubelet",
    kubelet_port=41001,
    kubelet_healthz_port=41002,
    api_port=6444,
    api_kubeconfig=f"{ROOT}/kubelet.kubeconfig",
    coredns="/dns-bin/coredns",
    dns_kubeconfig=f"{ROOT}/coredns.kubeconfig",
    ca_cert="/state/pki/ca.crt",
    serving_cert="/state/pki/kubelet.crt",
    serving_key="/state/pki/kubelet.key",
    pause_archive="/images/pause.tar",
)
CRI = "io.containerd.grpc.v1.cri"


def _containerd() -> dict[str, Any]:
    return tomllib.loads(render_containerd_config(PLAN))


def _cri() -> dict[str, Any]:
    cri: dict[str, Any] = _containerd()["plugins"][CRI]
    return cri


def test_containerd_keeps_its_files_and_socket_under_the_runtime_root() -> None:
    config = _containerd()
    assert config["version"] == 2
    assert config["root"] == f"{RUN}/containerd/root"
    assert config["state"] == f"{RUN}/containerd/state"
    assert config["grpc"]["address"] == f"{RUN}/containerd.sock"
    # The opt plugin would create /opt/containerd.
    assert "io.containerd.internal.v1.opt" in config["disabled_plugins"]


def test_containerd_cri_settings_the_machine_needs() -> None:
    cri = _cri()
    assert cri["sandbox_image"] == SANDBOX_IMAGE == "registry.k8s.io/pause:3.10"
    assert cri["restrict_oom_score_adj"] is True  # no CAP_SYS_RESOURCE here
    assert cri["netns_mounts_under_state_dir"] is True  # not /run/netns
    assert cri["stream_server_address"] == "127.0.0.1"
    assert cri["containerd"]["snapshotter"] == "overlayfs"
    assert cri["cni"] == {
        "bin_dir": "/usr/lib/cni",
        "conf_dir": f"{ROOT}/cni/net.d",
        "max_conf_num": 1,
    }


def test_runc_uses_cgroupfs_our_state_dir_and_one_shim_cgroup() -> None:
    runc = _cri()["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"] == {
        "BinaryName": "/usr/sbin/runc",
        "Root": f"{RUN}/runc",
        "SystemdCgroup": False,
        "ShimCgroup": "/tandem-realnode/shims",
    }
    assert _containerd()["cgroup"]["path"] == "/tandem-realnode/daemons"


def test_cni_network_is_one_local_bridge_without_masquerade_or_routes() -> None:
    conflist = render_cni_conflist(PLAN)
    (bridge,) = conflist["plugins"]  # no portmap, no firewall plugin: nothing else touches iptables
    assert bridge["type"] == "bridge"
    assert bridge["bridge"] == "tandem0"
    assert bridge["isGateway"] is True
    assert bridge["ipMasq"] is False
    assert bridge["hairpinMode"] is True
    ipam = bridge["ipam"]
    assert ipam["type"] == "host-local"
    # Pods reach their /24 and the one `kubernetes` Service address, through the bridge
    # (the host answers it: see the iptables rules); no default route.
    assert ipam["routes"] == [{"dst": "10.96.0.1/32"}]
    assert ipam["dataDir"] == f"{RUN}/cni-ipam"
    ((subnet,),) = ipam["ranges"]
    network = ipaddress.ip_network(subnet["subnet"])
    assert network.prefixlen == 24 and network.is_private and not network.is_loopback
    assert subnet["gateway"] == PLAN.gateway == str(network[1])


def test_kubelet_config_per_the_notes() -> None:
    config = render_kubelet_config(PLAN)
    assert config["kind"] == "KubeletConfiguration"
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == "/tandem-realnode"  # kubepods under our cgroup
    assert config["failCgroupV1"] is False
    assert config["failSwapOn"] is False
    assert config["registerNode"] is True
    assert config["imageGCHighThresholdPercent"] == 99
    assert config["imageGCLowThresholdPercent"] == 98
    assert config["evictionHard"]["memory.available"] == "100Mi"
    assert config["containerRuntimeEndpoint"] == f"unix://{RUN}/containerd.sock"
    assert config["podLogsDir"] == f"{RUN}/pod-logs"


def test_kubelet_listens_on_loopback_and_accepts_only_the_cluster_ca() -> None:
    config = render_kubelet_config(PLAN)
    assert config["address"] == "127.0.0.1"
    assert config["healthzBindAddress"] == "127.0.0.1"
    assert config["readOnlyPort"] == 0
    assert (config["port"], config["healthzPort"]) == (41001, 41002)
    auth = config["authentication"]
    assert auth["anonymous"] == {"enabled": False}
    assert auth["webhook"] == {"enabled": False}
    assert auth["x509"] == {"clientCAFile": "/state/pki/ca.crt"}
    assert (config["tlsCertFile"], config["tlsPrivateKeyFile"]) == (
        "/state/pki/kubelet.crt",
        "/state/pki/kubelet.key",
    )


def test_kubelet_is_node_localhost_with_the_bridge_as_node_ip() -> None:
    argv = kubelet_argv(PLAN)
    assert argv[0] == "/bin-dir/kubelet"
    assert "--hostname-override=localhost" in argv
    node_ip = next(a.split("=", 1)[1] for a in argv if a.startswith("--node-ip="))
    assert node_ip == PLAN.gateway
    assert ipaddress.ip_address(node_ip) in ipaddress.ip_network(PLAN.pod_cidr)
    assert f"--node-labels={NODE_KIND_LABEL}=real" in argv
    assert f"--root-dir={RUN}/kubelet" in argv
    assert containerd_argv(PLAN) == ("/usr/bin/containerd", f"--config={ROOT}/containerd.toml")


def test_pods_resolve_cluster_names_through_coredns_on_the_bridge_and_nothing_else() -> None:
    config = render_kubelet_config(PLAN)
    assert config["clusterDNS"] == [PLAN.gateway] and config["clusterDomain"] == "cluster.local"
    assert coredns_argv(PLAN) == ("/dns-bin/coredns", "-conf", f"{ROOT}/Corefile")
    corefile = render_files(PLAN)[f"{ROOT}/Corefile"]
    # One zone, from the API server with its own credentials, on the bridge address only;
    # nothing forwards other names anywhere.
    assert corefile.startswith("cluster.local:53 {")
    assert f"bind {PLAN.gateway}" in corefile
    assert f"kubeconfig {ROOT}/coredns.kubeconfig" in corefile
    assert "forward" not in corefile and corefile.count(":53 {") == 1


@pytest.mark.parametrize("name", ["containerd.toml", "10-tandem.conflist", "kubelet.yaml"])
def test_every_written_file_is_under_the_root_and_parses(name: str) -> None:
    files = render_files(PLAN)
    (path,) = [p for p in files if p.endswith(name)]
    assert Path(path).is_relative_to(ROOT)
    text = files[path]
    parsed = (
        tomllib.loads(text)
        if name.endswith(".toml")
        else json.loads(text)
        if name.endswith(".conflist")
        else yaml.safe_load(text)
    )
    assert parsed


def test_what_processes_fill_is_in_the_machine_runtime_root_and_records_are_not() -> None:
    # Mounts are found by their path: none may be under a test's temporary directory,
    # which a later session can rename or delete; teardown removes the runtime root whole.
    filled = (
        PLAN.containerd_root,
        PLAN.containerd_state,
        PLAN.containerd_socket,
        PLAN.runc_root,
        PLAN.cni_ipam_dir,
        PLAN.kubelet_root,
        PLAN.pod_logs_dir,
    )
    assert all(p.is_relative_to(RUN) for p in filled)
    kept = (PLAN.logs_dir, PLAN.inventory_copy, PLAN.plan_file, PLAN.containerd_config)
    assert all(p.is_relative_to(ROOT) and not p.is_relative_to(RUN) for p in kept)


def test_iptables_rules_drop_every_path_between_the_bridge_and_elsewhere() -> None:
    rules = render_iptables_rules(PLAN)
    assert ("filter", ("-I", "FORWARD", "1", "-j", "TANDEM-REALNODE-FWD")) in rules
    forward = [r for t, r in rules if t == "filter" and r[:2] == ("-A", "TANDEM-REALNODE-FWD")]
    assert forward == [
        ("-A", "TANDEM-REALNODE-FWD", "-i", "tandem0", "!", "-o", "tandem0", "-j", "DROP"),
        ("-A", "TANDEM-REALNODE-FWD", "!", "-i", "tandem0", "-o", "tandem0", "-j", "DROP"),
    ]
    inbound = [r for t, r in rules if t == "filter" and r[:2] == ("-A", "TANDEM-REALNODE-IN")]
    assert inbound[-1] == ("-A", "TANDEM-REALNODE-IN", "-d", "10.213.7.0/24", "-j", "DROP")
    assert {r[2:4] for r in inbound[:-1]} == {("-i", "tandem0"), ("-i", "lo")}
    # Only chains of our own, each created before it is hooked in.
    created = [r[1] for _, r in rules if r[0] == "-N"]
    assert created == ["TANDEM-REALNODE-FWD", "TANDEM-REALNODE-IN", "TANDEM-REALNODE-API"]
    hooked = [r[-1] for _, r in rules if r[0] == "-I"]
    assert all(created.index(c) <= hooked.index(c) for c in hooked)
    assert not any("MASQUERADE" in r or "SNAT" in r for _, r in rules)


def test_the_kubernetes_service_goes_to_the_api_proxy_on_the_bridge_address() -> None:
    (dnat,) = [r for t, r in render_iptables_rules(PLAN) if t == "nat" and r[0] == "-A"]
    assert dnat == (
        "-A", "TANDEM-REALNODE-API", "-i", "tandem0", "-d", "10.96.0.1/32", "-p", "tcp",
        "--dport", "443", "-j", "DNAT", "--to-destination", "10.213.7.1:6443",
    )  # fmt: skip
    assert api_proxy_argv(PLAN) == (
        "/usr/bin/socat",
        "TCP-LISTEN:6443,bind=10.213.7.1,fork,reuseaddr",
        "TCP:127.0.0.1:6444",
    )
