"""The owner's side of a real node: start its supervisor, load images, stop it.

    node = start_real_node(plan, tie_to_parent=True)   # returns once the kubelet is up
    node.import_images([Path("build/images/tandem.tar")])
    node.stop()                                        # everything it made is gone

With ``tie_to_parent`` the supervisor's stdin is a pipe only this process holds, so the
node is torn down when this process exits or is killed; otherwise (``tandem dev cluster
up``) it runs until :meth:`RealNode.stop` is called from any process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from tandem.devcluster import processes
from tandem.devcluster.probes import wait_until
from tandem.devcluster.realnode import host
from tandem.devcluster.realnode.inventory import load_inventory
from tandem.devcluster.realnode.lock import busy_message, current_holder
from tandem.devcluster.realnode.plan import INVENTORY_FILE, LOCK_FILE, NodePlan, RealNodeRecord
from tandem.devcluster.realnode.supervisor import SupervisorStatus, read_status
from tandem.devcluster.realnode.teardown import teardown

logger = logging.getLogger(__name__)

SUPERVISOR = "realnode-supervisor"
IMPORT_TIMEOUT_S = 600.0


class RealNodeError(RuntimeError):
    """The real node failed to start or to stop; the message says why in one line."""


class RealNode:
    def __init__(
        self,
        record: RealNodeRecord,
        *,
        pipe: int | None = None,
        child: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.record = record
        self._pipe = pipe  # the write end of the supervisor's stdin (tied nodes)
        self._child = child

    @property
    def plan(self) -> NodePlan:
        return self.record.plan

    @property
    def name(self) -> str:
        return self.plan.node_name

    @property
    def pod_cidr(self) -> str:
        return self.plan.pod_cidr

    @property
    def bridge(self) -> str:
        return self.plan.bridge

    @property
    def containerd_socket(self) -> Path:
        return self.plan.containerd_socket

    @property
    def logs_dir(self) -> Path:
        return self.plan.logs_dir

    def log_files(self) -> list[tuple[str, Path]]:
        return [(n, self.logs_dir / f"{n}.log") for n in (SUPERVISOR, "containerd", "kubelet")]

    def status(self) -> SupervisorStatus | None:
        return read_status(self.plan)

    def supervisor_running(self) -> bool:
        return processes.is_running(self.record.supervisor)

    def failure(self) -> str | None:
        """Why the node is not usable, or None while it is (for waits to abort on)."""
        status = self.status()
        if status is not None and status.phase == "failed":
            return status.message
        if not self.supervisor_running():
            return f"the real node's supervisor exited; see {self.logs_dir / SUPERVISOR}.log"
        return None

    def import_images(self, archives: Iterable[Path]) -> None:
        """Load OCI archive tarballs into the node's containerd (namespace k8s.io, where
        the kubelet looks), under the names their index records."""
        ctr = [self.plan.tools.ctr, "--address", str(self.containerd_socket), "-n", "k8s.io"]
        for archive in archives:
            try:
                host.run([*ctr, "images", "import", str(archive)], timeout_s=IMPORT_TIMEOUT_S)
            except host.HostError as err:
                raise RealNodeError(f"cannot import {archive}: {err}") from err

    def images(self) -> list[str]:
        """The image references the node's containerd holds."""
        ctr = [self.plan.tools.ctr, "--address", str(self.containerd_socket), "-n", "k8s.io"]
        refs = host.run([*ctr, "images", "list", "-q"]).split()
        return [r for r in refs if not r.startswith("sha256:")]

    def daemon_rss_bytes(self) -> dict[str, int]:
        """Resident memory of kubelet and containerd, by program name."""
        return self._rss_by_program("daemons")

    def pods_rss_bytes(self) -> int:
        """Resident memory of every container process on the node."""
        return sum(self._rss_by_program("kubepods").values())

    def _rss_by_program(self, child: str) -> dict[str, int]:
        rss: dict[str, int] = {}
        for cgroup in host.existing_cgroups(self.plan.cgroup_path(child))[:1]:
            for pid in host.pids_in_tree(cgroup):
                try:
                    name = Path(f"/proc/{pid}/comm").read_text().strip()
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                rss[name] = rss.get(name, 0) + _vm_rss_bytes(status)
        return rss

    def stop(self, *, timeout_s: float = 120.0) -> float | None:
        """Tear the node down; the teardown's seconds as the supervisor measured them
        (None when it had nothing to remove). RealNodeError if something is left."""
        if self.supervisor_running():
            if self._pipe is not None:
                os.close(self._pipe)  # EOF: the same path as this process dying
                self._pipe = None
            else:
                os.kill(self.record.supervisor.pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while self.supervisor_running() and time.monotonic() < deadline:
                if self._child is not None:
                    self._child.poll()
                time.sleep(0.05)
            if self.supervisor_running():
                raise RealNodeError(f"the real node's supervisor did not stop in {timeout_s:.0f}s")
        if self._child is not None:
            self._child.wait()
        status = self.status()
        if status is not None and status.phase == "failed":
            raise RealNodeError(status.message)
        if status is not None and status.phase == "stopped":
            return status.teardown_s
        return self._teardown_here()

    def _teardown_here(self) -> float | None:
        """The supervisor died without cleaning up (it was killed): clean up from here,
        unless a newer node already did (it cleans its predecessors' leftovers)."""
        inventory = load_inventory(INVENTORY_FILE)
        if inventory is None or inventory.clean or inventory.root != self.plan.root:
            return None
        holder = current_holder(LOCK_FILE)
        if holder is not None:
            raise RealNodeError(
                f"the real node in {self.plan.root} was not cleaned up and another node "
                f"holds the machine ({holder.describe()}); it will clean up when it starts"
            )
        return teardown(inventory)


def check_root() -> None:
    if os.geteuid() != 0:
        raise RealNodeError("a real node needs root (cgroups, mounts, a bridge, iptables)")


def check_free() -> None:
    """RealNodeError naming the holder if another real node runs on this machine."""
    holder = current_holder(LOCK_FILE)
    if holder is not None:
        raise RealNodeError(busy_message(holder, LOCK_FILE))


def start_real_node(
    plan: NodePlan,
    *,
    tie_to_parent: bool,
    timeout_s: float = 120.0,
    on_spawn: Callable[[RealNode], None] = lambda node: None,
) -> RealNode:
    """Start the supervisor and return once containerd runs, the pause image is in and
    the kubelet answers its health check (registering the node is the API's part).
    ``on_spawn`` gets the node as soon as the supervisor exists, to record it."""
    check_root()
    check_free()
    root = Path(plan.root)
    plan.logs_dir.mkdir(parents=True, exist_ok=True)
    plan.status_file.unlink(missing_ok=True)
    plan.plan_file.write_text(plan.model_dump_json(indent=2) + "\n")
    argv = [sys.executable, "-m", "tandem.devcluster.realnode", str(plan.plan_file)]
    read_end, pipe = os.pipe() if tie_to_parent else (None, None)
    with (plan.logs_dir / f"{SUPERVISOR}.log").open("ab") as log:
        child = subprocess.Popen(
            [*argv, "--watch-stdin"] if tie_to_parent else argv,
            stdin=read_end if read_end is not None else subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            # Its own session: a terminal's Ctrl-C or a killed process group of the
            # owner must not stop it before it has cleaned up.
            start_new_session=True,
            close_fds=True,
            cwd=root,
        )
    if read_end is not None:
        os.close(read_end)
    supervisor = processes.record_of(SUPERVISOR, child, plan.logs_dir / f"{SUPERVISOR}.log")
    record = RealNodeRecord(plan=plan, supervisor=supervisor)
    node = RealNode(record, pipe=pipe, child=child)
    on_spawn(node)

    def started() -> bool:
        status = node.status()
        return status is not None and status.phase == "ready"

    try:
        wait_until(started, timeout_s=timeout_s, what="the real node's kubelet", abort=node.failure)
    except (RuntimeError, TimeoutError) as err:
        reason = node.failure() or str(err)
        with contextlib.suppress(RealNodeError):  # the reason above says what went wrong
            node.stop()
        raise RealNodeError(reason) from err
    return node


def _vm_rss_bytes(proc_status: str) -> int:
    for line in proc_status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0
