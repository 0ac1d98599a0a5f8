"""Command lines, kubeconfig and kwok config are pure renderings: check the contracts the
running cluster depends on."""

from __future__ import annotations

import base64
import ipaddress
from pathlib import Path

import pytest
import yaml

from tandem.devcluster import dns
from tandem.devcluster.binaries import ClusterBinaries
from tandem.devcluster.components import (
    NODE_IP,
    POD_CIDR,
    Ports,
    render_components,
    render_kwok_config,
)
from tandem.devcluster.kubeconfig import (
    ADMIN_GROUP,
    ADMIN_USER,
    render_kubeconfig,
    render_token_line,
)
from tandem.devcluster.layout import StateLayout
from tandem.devcluster.pki import KubeletPki, Pki, render_openssl_config
from tandem.devcluster.realnode.join import NODE_GROUP, NODE_USER

PORTS = Ports(
    etcd_client=2379, etcd_peer=2380, apiserver=6443, controller_manager=10257,
    scheduler=10259, kwok=10247,
)  # fmt: skip


KUBELET_PKI = KubeletPki(
    serving_cert=Path("/state/kubelet.crt"),
    serving_key=Path("/state/kubelet.key"),
    client_cert=Path("/state/client.crt"),
    client_key=Path("/state/client.key"),
    kwok_cert=Path("/state/kwok.crt"),
    kwok_key=Path("/state/kwok.key"),
)


def _render(kubelet_pki: KubeletPki | None = None) -> dict[str, tuple[str, ...]]:
    root = Path("/state")
    pki = Pki(
        ca_cert=root / "ca.crt",
        serving_cert=root / "s.crt",
        serving_key=root / "s.key",
        service_account_key=root / "sa.key",
    )
    bins = ClusterBinaries(bin_dir=Path("/bin-dir"), kubectl=Path("/kubectl"))
    components = render_components(bins, StateLayout(root), pki, PORTS, kubelet_pki)
    return {c.name: c.argv for c in components}


def test_components_start_in_dependency_order() -> None:
    assert list(_render()) == [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    ]


def test_everything_listens_on_loopback_only() -> None:
    for name, argv in _render().items():
        for arg in argv:
            if arg.startswith(("--bind-address=", "--listen-", "--server-address=")):
                assert "127.0.0.1" in arg, (name, arg)


@pytest.mark.parametrize(
    "flag",
    [
        "--authorization-mode=Node,RBAC",
        "--kubelet-preferred-address-types=Hostname,InternalIP",
        "--token-auth-file=/state/tokens.csv",
        "--service-account-key-file=/state/sa.key",
        "--service-account-signing-key-file=/state/sa.key",
        "--etcd-servers=http://127.0.0.1:2379",
        "--secure-port=6443",
    ],
)
def test_apiserver_flags(flag: str) -> None:
    assert flag in _render()["kube-apiserver"]


def test_controller_manager_signs_service_account_tokens() -> None:
    argv = _render()["kube-controller-manager"]
    assert "--service-account-private-key-file=/state/sa.key" in argv
    assert "--leader-elect=false" in argv


def test_kwok_manages_only_annotated_nodes_with_loopback_addresses() -> None:
    argv = _render()["kwok"]
    assert "--manage-all-nodes=false" in argv
    assert "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake" in argv
    assert f"--cidr={POD_CIDR}" in argv
    assert f"--node-ip={NODE_IP}" in argv
    assert any(a.startswith("--node-lease-duration-seconds=") for a in argv)
    # Whatever dials a simulated pod or node stays on this machine.
    assert ipaddress.ip_network(POD_CIDR).subnet_of(ipaddress.ip_network("127.0.0.0/8"))
    assert ipaddress.ip_address(NODE_IP).is_loopback
    # The kubelet port of its nodes is kwok's own server: kwok answers logs/exec itself.
    assert f"--node-port={PORTS.kwok}" in argv
    assert f"--server-address=127.0.0.1:{PORTS.kwok}" in argv
    assert not any(a.startswith("--node-name=") for a in argv)  # no Hostname address


def test_without_a_real_node_no_kubelet_credentials_are_configured() -> None:
    rendered = _render()
    assert not any("kubelet-client" in a for a in rendered["kube-apiserver"])
    assert not any(a.startswith("--tls-") for a in rendered["kwok"])


def test_with_a_real_node_the_apiserver_and_kubelets_authenticate_each_other() -> None:
    rendered = _render(KUBELET_PKI)
    apiserver = rendered["kube-apiserver"]
    assert "--kubelet-client-certificate=/state/client.crt" in apiserver
    assert "--kubelet-client-key=/state/client.key" in apiserver
    assert "--kubelet-certificate-authority=/state/ca.crt" in apiserver
    # kwok then needs a certificate of the CA too, or the apiserver refuses it.
    assert "--tls-cert-file=/state/kwok.crt" in rendered["kwok"]
    assert "--tls-private-key-file=/state/kwok.key" in rendered["kwok"]


def test_the_kubelet_token_is_the_node_identity() -> None:
    assert render_token_line("t", NODE_USER, NODE_GROUP) == (
        't,system:node:localhost,system:node:localhost,"system:nodes"\n'
    )


def test_kwok_config_holds_only_the_stages() -> None:
    # A KwokConfiguration document would switch off kwok's option defaults.
    stages = "---\nkind: Stage\nmetadata:\n  name: a\n---\nkind: Stage\nmetadata:\n  name: b\n"
    docs = [d for d in yaml.safe_load_all(render_kwok_config(stages)) if d is not None]
    assert [d["kind"] for d in docs] == ["Stage"] * 4
    # Tandem's own last: a labelled node reports Ready=False; unlabelled, it is Ready
    # again with nothing but its conditions rewritten.
    not_ready, recover = docs[-2:]
    assert not_ready["metadata"]["name"] == "tandem-node-not-ready"
    assert 'status: "False"' in not_ready["spec"]["next"]["statusTemplate"]
    assert recover["metadata"]["name"] == "tandem-node-recover"
    assert recover["spec"]["weight"] > 0  # wins over kwok's node-initialize (no weight)
    assert "addresses" not in recover["spec"]["next"]["statusTemplate"]


def test_kubeconfig_trusts_the_ca_and_uses_the_token() -> None:
    config = render_kubeconfig(server="https://127.0.0.1:6443", ca_pem=b"PEM", token="t0k")
    parsed = yaml.safe_load(yaml.safe_dump(config))
    (cluster,) = parsed["clusters"]
    assert cluster["cluster"]["server"] == "https://127.0.0.1:6443"
    assert base64.b64decode(cluster["cluster"]["certificate-authority-data"]) == b"PEM"
    (user,) = parsed["users"]
    assert user["user"] == {"token": "t0k"}
    assert parsed["current-context"] == parsed["contexts"][0]["name"]


def test_token_lines_name_the_user_and_its_group_if_any() -> None:
    assert render_token_line("abc", ADMIN_USER, ADMIN_GROUP) == 'abc,admin,admin,"system:masters"\n'
    # The cluster's own daemons are users in no group: they hold what their roles grant.
    assert render_token_line("t0k3n", dns.USER) == "t0k3n,tandem:cluster-dns,tandem:cluster-dns\n"


def test_serving_certificate_covers_loopback() -> None:
    config = render_openssl_config(["127.0.0.1"], ["localhost"])
    assert "subjectAltName = IP:127.0.0.1, DNS:localhost" in config
    assert "CA:TRUE" in config
