"""Thin I/O on the machine for the real node: cgroups, mounts, links, iptables, sysctl.

Each function does one thing and reports failure with what it tried; the decisions (what
is ours, in which order) are in :mod:`tandem.devcluster.realnode.inventory`. Linux, root.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from tandem.devcluster.realnode.inventory import (
    DirSnapshot,
    cgroup_mount_points,
    mount_points_under,
)

MOUNTINFO = Path("/proc/self/mountinfo")
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_MNT_DETACH = 2
_CPUSET_FILES = ("cpuset.cpus", "cpuset.mems")


class HostError(RuntimeError):
    """A host operation failed; the message names the command or path."""


def run(argv: Sequence[str], *, timeout_s: float = 60.0) -> str:
    """Run a command; its stdout, or HostError with its stderr."""
    try:
        result = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise HostError(f"{' '.join(argv)}: {err}") from err
    if result.returncode != 0:
        raise HostError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


# cgroups


def cgroup_hierarchies() -> list[Path]:
    return [Path(p) for p in cgroup_mount_points(MOUNTINFO.read_text())]


def existing_cgroups(relpath: str) -> list[Path]:
    """``relpath`` in every hierarchy where it exists."""
    paths = (h / relpath.lstrip("/") for h in cgroup_hierarchies())
    return [p for p in paths if p.is_dir()]


def create_cgroup(hierarchy: Path, relpath: str) -> None:
    """mkdir one cgroup; in a v1 cpuset hierarchy a new cgroup has no CPUs or memory
    nodes until given its parent's, and refuses tasks before that."""
    path = hierarchy / relpath.lstrip("/")
    path.mkdir(exist_ok=True)
    for name in _CPUSET_FILES:
        own = path / name
        if own.is_file() and not own.read_text().strip():
            own.write_text((path.parent / name).read_text())


def join_cgroups(paths: Sequence[Path]) -> None:
    """Move the calling process into each cgroup (``preexec_fn`` of a single-threaded
    parent: it only writes files)."""
    for path in paths:
        with open(path / "cgroup.procs", "w") as procs:
            procs.write("0")


def pids_in_tree(root: Path) -> set[int]:
    pids: set[int] = set()
    for directory, _, files in os.walk(root):
        if "cgroup.procs" in files:
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in Path(directory, "cgroup.procs").read_text().split())
    return pids


def kill_cgroup_trees(roots: Sequence[Path], *, timeout_s: float = 20.0) -> None:
    """SIGKILL every process in the trees until none is left (a process may fork while
    we kill); reaps our own children on the way. HostError if some survive."""
    deadline = time.monotonic() + timeout_s
    me = os.getpid()
    while True:
        pids = set().union(*(pids_in_tree(r) for r in roots if r.is_dir())) - {me}
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        reap_children()
        if time.monotonic() > deadline:
            raise HostError(f"processes {sorted(pids)} survived SIGKILL in {roots[0]}")
        time.sleep(0.05)


def reap_children() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def remove_cgroup_tree(root: Path) -> None:
    """rmdir every cgroup of the tree, leaves first (a cgroup's files go with it)."""
    for directory, _, _ in sorted(os.walk(root), key=lambda w: w[0].count("/"), reverse=True):
        try:
            os.rmdir(directory)
        except FileNotFoundError:
            pass
        except OSError as err:
            raise HostError(f"cannot remove cgroup {directory}: {err.strerror}") from err


# mounts


def mounts_under(root: Path) -> list[str]:
    return mount_points_under(MOUNTINFO.read_text(), root)


def unmount(point: str) -> None:
    """umount(2), or a lazy detach when something still holds it busy."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(point.encode(), 0) == 0:
        return
    err = ctypes.get_errno()
    if err == errno.EINVAL:  # no longer a mount point (unmounted with its parent)
        return
    if err == errno.EBUSY and libc.umount2(point.encode(), _MNT_DETACH) == 0:
        return
    raise HostError(f"cannot unmount {point}: {os.strerror(ctypes.get_errno())}")


def unmount_all_under(root: Path, *, rounds: int = 10) -> None:
    """Unmount everything at or below ``root``, deepest first, until nothing is left."""
    for _ in range(rounds):
        points = mounts_under(root)
        if not points:
            return
        for point in points:
            unmount(point)
    left = mounts_under(root)
    if left:
        raise HostError(f"still mounted after {rounds} rounds: {', '.join(left)}")


# network


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def create_bridge(name: str, address: str, prefix_len: int) -> None:
    run(["ip", "link", "add", name, "type", "bridge"])
    run(["ip", "addr", "add", f"{address}/{prefix_len}", "dev", name])
    run(["ip", "link", "set", name, "up"])


def delete_link(name: str) -> None:
    if link_exists(name):
        run(["ip", "link", "delete", name])


def ipv4_routes() -> list[str]:
    """Destinations of the main routing table (``default`` included)."""
    return [line.split()[0] for line in run(["ip", "-4", "route", "show"]).splitlines() if line]


def iptables_rules(binary: str, table: str) -> str | None:
    """``BINARY -t TABLE -S``; None when that table or family does not exist here."""
    try:
        return run([binary, "-w", "-t", table, "-S"])
    except HostError:
        return None


def iptables(binary: str, table: str, *args: str) -> None:
    run([binary, "-w", "-t", table, *args])


def boot_id() -> str:
    return BOOT_ID.read_text().strip()


def read_ip_forward() -> str:
    return IP_FORWARD.read_text().strip()


def write_ip_forward(value: str) -> None:
    IP_FORWARD.write_text(value + "\n")


# shared directories


def list_tree(path: Path) -> list[str]:
    """Every path below ``path``, relative to it (symlinks not followed)."""
    if not path.is_dir():
        return []
    found = []
    for directory, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            found.append(os.path.relpath(os.path.join(directory, name), path))
    return found


def snapshot_dir(path: Path) -> DirSnapshot:
    return DirSnapshot(path=str(path), existed=path.exists(), entries=tuple(list_tree(path)))


def remove_entry(path: Path) -> None:
    """Remove one file, link or (by then empty) directory; gone already is fine."""
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink()
