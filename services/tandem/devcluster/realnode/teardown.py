"""Remove everything an inventory lists: the one cleanup path for a normal stop, a failed
start, a dead owner and the leftovers of a crashed run.

Order matters: processes first (nothing can remount or recreate), then mounts deepest
first (overlay rootfs, shm, network namespaces, projected-token tmpfs, the kubelet root's
bind mount), then cgroups, links, iptables chains, ip_forward and the files the node's
programs left in shared directories. Every step runs even when an earlier one failed;
the inventory is marked clean only when all succeeded.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from tandem.devcluster.realnode import host
from tandem.devcluster.realnode.inventory import (
    Inventory,
    new_entries,
    plan_iptables_cleanup,
    save_records,
)
from tandem.devcluster.realnode.plan import INVENTORY_FILE, IPTABLES, IPTABLES_TABLES

logger = logging.getLogger(__name__)


class TeardownError(RuntimeError):
    """Some of the node could not be removed; the message lists what and why."""


def teardown(inventory: Inventory) -> float:
    """Remove what ``inventory`` lists; the seconds it took. TeardownError if anything
    remains (the inventory then stays unclean, and the next start tries again)."""
    began = time.monotonic()
    root = Path(inventory.root)
    runtime_root = Path(inventory.runtime_root)
    errors: list[str] = []

    def step(what: str, action: Callable[[], None]) -> None:
        try:
            action()
        except (host.HostError, OSError) as err:
            errors.append(f"{what}: {err}")

    if inventory.boot_id == host.boot_id():
        _remove_live_parts(inventory, step)
    else:
        # Processes, mounts, cgroups, links and chains died with the previous boot; the
        # shared directories may hold what others made since. Only our files remain.
        logger.info("the real node in %s ran before a reboot: removing its files only", root)
    if not host.mounts_under(runtime_root):  # never delete files through a mount
        step(f"remove {runtime_root}", partial(_remove_tree, runtime_root))
    if errors:
        raise TeardownError("real node teardown incomplete: " + "; ".join(errors))
    save_records(INVENTORY_FILE, inventory.model_copy(update={"clean": True}))
    elapsed = time.monotonic() - began
    logger.info("real node in %s torn down in %.1fs", root, elapsed)
    return elapsed


def _remove_live_parts(
    inventory: Inventory, step: Callable[[str, Callable[[], None]], None]
) -> None:
    cgroups = [Path(h) / inventory.cgroup for h in inventory.cgroup_hierarchies]

    step("kill processes", lambda: host.kill_cgroup_trees(cgroups))
    step("unmount", lambda: host.unmount_all_under(Path(inventory.runtime_root)))
    for cgroup in cgroups:
        step(f"remove {cgroup}", partial(host.remove_cgroup_tree, cgroup))
    if inventory.bridge:
        step(f"delete bridge {inventory.bridge}", lambda: host.delete_link(inventory.bridge or ""))
    step("iptables", lambda: _remove_chains(inventory))
    step("ip_forward", lambda: host.write_ip_forward(inventory.ip_forward_before))
    step("shared directories", lambda: _remove_added_files(inventory))


def _remove_chains(inventory: Inventory) -> None:
    ours = list(inventory.iptables_chains)
    for binary in IPTABLES:
        for table in IPTABLES_TABLES:
            rules = host.iptables_rules(binary, table)
            if rules is None:
                continue
            cleanup = plan_iptables_cleanup(rules, ours)
            for rule in cleanup.delete_rules:
                host.iptables(binary, table, *rule)
            for chain in cleanup.chains:
                host.iptables(binary, table, "-F", chain)
            for chain in cleanup.chains:
                host.iptables(binary, table, "-X", chain)


def _remove_added_files(inventory: Inventory) -> None:
    for snapshot in inventory.shared_dirs:
        base = Path(snapshot.path)
        if not snapshot.existed:
            _remove_tree(base)
            continue
        for relative in new_entries(snapshot, host.list_tree(base)):
            host.remove_entry(base / relative)


def _remove_tree(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
