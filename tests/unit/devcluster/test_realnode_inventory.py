"""The rules that decide what cleanup removes: only what the real node made."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.devcluster.realnode.inventory import (
    DirSnapshot,
    Inventory,
    InventoryError,
    cgroup_mount_points,
    chains_in,
    load_inventory,
    mount_points_under,
    new_entries,
    plan_iptables_cleanup,
    save_inventory,
)

ROOT = Path("/tmp/s/realnode")
# Lines as /proc/self/mountinfo shows them on these machines (a real node with one pod).
MOUNTINFO = "\n".join(
    [
        "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw",
        "31 22 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755",
        "36 31 0:33 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory",
        "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd",
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw",
        "90 22 254:0 /tmp/s/realnode/kubelet /tmp/s/realnode/kubelet rw shared:1"
        " - ext4 /dev/vda rw",
        "91 90 0:50 / /tmp/s/realnode/kubelet/pods/u1/volumes/kubernetes.io~projected/tok rw"
        " - tmpfs tmpfs rw",
        "92 22 0:51 / /tmp/s/realnode/containerd/state/io.containerd.grpc.v1.cri/sandboxes/a/shm"
        " rw - tmpfs shm rw",
        "93 22 0:4 net:[4026532] /tmp/s/realnode/containerd/state/io.containerd.grpc.v1.cri/"
        "netns/cni-1 rw - nsfs nsfs rw",
        "94 22 0:52 / /tmp/s/realnode/containerd/state/io.containerd.runtime.v2.task/k8s.io/a/"
        "rootfs rw - overlay overlay rw",
        # A second mount stacked on the kubelet root, and a neighbour that only shares a prefix.
        "95 90 254:0 /x /tmp/s/realnode/kubelet rw - ext4 /dev/vda rw",
        "96 22 0:53 / /tmp/s/realnode2/kubelet rw - tmpfs tmpfs rw",
        "97 22 0:54 / /tmp/s/realnode/with\\040space rw - tmpfs tmpfs rw",
    ]
)


def test_mounts_under_the_root_deepest_first_and_stacked_newest_first() -> None:
    points = mount_points_under(MOUNTINFO, ROOT)
    assert "/tmp/s/realnode2/kubelet" not in points
    assert "/tmp/s/realnode/with space" in points
    assert len(points) == 7
    projected = points.index("/tmp/s/realnode/kubelet/pods/u1/volumes/kubernetes.io~projected/tok")
    kubelet_root = [i for i, p in enumerate(points) if p == "/tmp/s/realnode/kubelet"]
    assert len(kubelet_root) == 2 and projected < min(kubelet_root)
    depths = [p.count("/") for p in points]
    assert depths == sorted(depths, reverse=True)


def test_cgroup_hierarchies_from_mountinfo() -> None:
    assert cgroup_mount_points(MOUNTINFO) == [
        "/sys/fs/cgroup/memory",
        "/sys/fs/cgroup/systemd",
        "/sys/fs/cgroup/unified",
    ]


def test_only_entries_added_since_the_snapshot_are_removed_children_first() -> None:
    snapshot = DirSnapshot(path="/run/containerd", existed=True, entries=("s", "s/old"))
    present = ["s", "s/old", "s/new", "fifo", "fifo/x/y"]
    assert new_entries(snapshot, present) == ["fifo/x/y", "s/new", "fifo"]


# `iptables -t filter -S` while a real node runs, next to a chain that is not ours.
FILTER_RULES = """\
-P INPUT ACCEPT
-P FORWARD ACCEPT
-P OUTPUT ACCEPT
-N DOCKER
-N KUBE-FIREWALL
-N KUBE-KUBELET-CANARY
-N TANDEM-REALNODE-FWD
-A INPUT -j KUBE-FIREWALL
-A FORWARD -j TANDEM-REALNODE-FWD
-A FORWARD -o docker0 -j DOCKER
-A OUTPUT -j KUBE-FIREWALL
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming \
localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
-A TANDEM-REALNODE-FWD -i tandem0 ! -o tandem0 -j DROP
"""
OURS = ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT", "TANDEM-REALNODE-FWD")


def test_iptables_cleanup_unhooks_then_deletes_only_our_chains() -> None:
    cleanup = plan_iptables_cleanup(FILTER_RULES, OURS)
    assert cleanup.delete_rules == (
        ("-D", "INPUT", "-j", "KUBE-FIREWALL"),
        ("-D", "FORWARD", "-j", "TANDEM-REALNODE-FWD"),
        ("-D", "OUTPUT", "-j", "KUBE-FIREWALL"),
    )
    assert cleanup.chains == ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "TANDEM-REALNODE-FWD")
    assert "DOCKER" not in cleanup.chains


def test_iptables_cleanup_of_a_clean_table_is_empty() -> None:
    cleanup = plan_iptables_cleanup("-P INPUT ACCEPT\n-N DOCKER\n-A INPUT -j DOCKER\n", OURS)
    assert cleanup.delete_rules == () and cleanup.chains == ()


def test_chains_in_lists_builtin_and_user_chains() -> None:
    assert chains_in(FILTER_RULES) == {
        "INPUT",
        "FORWARD",
        "OUTPUT",
        "DOCKER",
        "KUBE-FIREWALL",
        "KUBE-KUBELET-CANARY",
        "TANDEM-REALNODE-FWD",
    }


def test_inventory_round_trips(tmp_path: Path) -> None:
    inventory = Inventory(
        root=str(ROOT),
        runtime_root="/var/lib/tandem-realnode",
        cgroup="tandem-realnode",
        supervisor_pid=42,
        boot_id="b00t",
        ip_forward_before="0",
        shared_dirs=(DirSnapshot(path="/var/lib/cni", existed=False),),
        iptables_chains=OURS,
        bridge="tandem0",
    )
    path = tmp_path / "inventory.json"
    assert load_inventory(path) is None
    save_inventory(path, inventory)
    assert load_inventory(path) == inventory


def test_an_unreadable_inventory_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "inventory.json"
    path.write_text('{"root": "/x"}')
    with pytest.raises(InventoryError) as unreadable:
        load_inventory(path)
    assert str(path) in str(unreadable.value) and "\n" not in str(unreadable.value)
    path.write_text('{"root": "/x", "clean": true, "field_of_an_older_version": 1}')
    assert load_inventory(path) is None
