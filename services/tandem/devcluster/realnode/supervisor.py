"""The real node's supervisor: brings the node up, keeps it, and tears it down.

    python -m tandem.devcluster.realnode PLAN.json [--watch-stdin]

It runs in its own session and outlives whatever asked for the node, because the node's
processes outlive their parents too (containerd shims re-parent to PID 1): a
PR_SET_PDEATHSIG on kubelet and containerd would leave every pod running. With
``--watch-stdin`` its stdin is a pipe whose other end only the owner holds; the kernel
closes it when the owner dies, however it dies, and the EOF starts the teardown. Without
it (``tandem dev cluster up``), SIGTERM does. It holds the machine's real-node lock from
before anything is made until everything is gone.
"""

from __future__ import annotations

import argparse
import ctypes
import ipaddress
import logging
import os
import select
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Literal

from pydantic import BaseModel, ConfigDict

from tandem.devcluster.probes import http_status, wait_until
from tandem.devcluster.realnode import host
from tandem.devcluster.realnode.configs import (
    api_proxy_argv,
    containerd_argv,
    coredns_argv,
    kubelet_argv,
    render_files,
    render_iptables_rules,
)
from tandem.devcluster.realnode.inventory import (
    Inventory,
    chains_in,
    load_inventory,
    save_records,
)
from tandem.devcluster.realnode.lock import LockHolder, NodeLock, RealNodeBusyError
from tandem.devcluster.realnode.plan import (
    GUARD_CHAINS,
    INVENTORY_FILE,
    IPTABLES,
    IPTABLES_TABLES,
    KUBELET_CHAINS,
    LOCK_FILE,
    SHARED_DIRS,
    NodePlan,
)
from tandem.devcluster.realnode.teardown import TeardownError, teardown

logger = logging.getLogger(__name__)

Phase = Literal["starting", "ready", "stopping", "stopped", "failed"]
EXIT_FAILED = 1
EXIT_BUSY = 2
CONTAINERD_TIMEOUT_S = 30.0
_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
KUBELET_TIMEOUT_S = 60.0


class SupervisorStatus(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    phase: Phase
    pid: int
    message: str = ""
    teardown_s: float | None = None


def read_status(plan: NodePlan) -> SupervisorStatus | None:
    try:
        return SupervisorStatus.model_validate_json(plan.status_file.read_text())
    except (FileNotFoundError, ValueError):
        return None


def _write_status(plan: NodePlan, status: SupervisorStatus) -> None:
    tmp = plan.status_file.with_name(plan.status_file.name + ".tmp")
    tmp.write_text(status.model_dump_json() + "\n")
    tmp.replace(plan.status_file)


class _StopRequestedError(Exception):
    """The owner went away or asked the node to stop during start-up."""


class Supervisor:
    def __init__(self, plan: NodePlan, *, watch_stdin: bool) -> None:
        self.plan = plan
        self.watch_stdin = watch_stdin
        self.inventory: Inventory | None = None
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self._stop_reason: str | None = None

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        # Orphans among the node's processes (every shim daemonizes, and container
        # processes outlive a killed shim) become our children, not PID 1's: we reap
        # them, so none is left a zombie where PID 1 does not reap.
        _become_subreaper()
        lock = NodeLock(LOCK_FILE)
        try:
            lock.acquire(LockHolder(pid=os.getpid(), root=self.plan.root))
        except RealNodeBusyError as err:
            self._status("failed", str(err))
            return EXIT_BUSY
        failure = ""
        try:
            _clean_leftovers()
            self._bring_up()
            self._status("ready")
            reason = self._wait()
            logger.info("stopping: %s", reason)
            self._status("stopping", reason)
        except _StopRequestedError:
            logger.info("stopping during start-up: %s", self._stop_reason)
        except Exception as err:
            logger.exception("real node failed")
            failure = str(err)
        finally:
            elapsed = None
            if self.inventory is not None:
                try:
                    elapsed = teardown(self.inventory)
                except TeardownError as err:
                    failure = f"{failure}; {err}" if failure else str(err)
            lock.release()
        if failure:
            self._status("failed", failure, elapsed)
            return EXIT_FAILED
        self._status("stopped", teardown_s=elapsed)
        return 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stop_reason = f"signal {signal.Signals(signum).name}"

    def _status(self, phase: Phase, message: str = "", teardown_s: float | None = None) -> None:
        status = SupervisorStatus(
            phase=phase, pid=os.getpid(), message=message, teardown_s=teardown_s
        )
        _write_status(self.plan, status)

    def _stop_requested(self) -> str | None:
        if self._stop_reason is None and self.watch_stdin:
            readable, _, _ = select.select([sys.stdin.fileno()], [], [], 0)
            if readable and not os.read(sys.stdin.fileno(), 4096):
                self._stop_reason = "the owner exited (its pipe closed)"
        return self._stop_reason

    def _check_stop(self) -> None:
        if self._stop_requested() is not None:
            raise _StopRequestedError

    def _record(self, **changes: object) -> None:
        assert self.inventory is not None
        self.inventory = self.inventory.model_copy(update=changes)
        save_records(INVENTORY_FILE, self.inventory)

    def _bring_up(self) -> None:
        plan = self.plan
        _check_preconditions(plan)
        self.inventory = Inventory(
            root=plan.root,
            runtime_root=plan.runtime_root,
            cgroup=plan.cgroup,
            supervisor_pid=os.getpid(),
            boot_id=host.boot_id(),
            ip_forward_before=host.read_ip_forward(),
            shared_dirs=tuple(host.snapshot_dir(d) for d in SHARED_DIRS),
            iptables_chains=(*KUBELET_CHAINS, *GUARD_CHAINS),
        )
        save_records(INVENTORY_FILE, self.inventory)

        hierarchies = host.cgroup_hierarchies()
        self._record(cgroup_hierarchies=tuple(str(h) for h in hierarchies))
        for hierarchy in hierarchies:
            for child in ((), ("daemons",), ("shims",)):
                host.create_cgroup(hierarchy, plan.cgroup_path(*child))
        self._record(bridge=plan.bridge)
        host.create_bridge(plan.bridge, plan.gateway, plan.prefix_len)
        self._record(guard_chains=GUARD_CHAINS)
        for table, rule in render_iptables_rules(plan):
            host.iptables("iptables", table, *rule)

        for path, text in render_files(plan).items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text)
        for directory in (plan.kubelet_root, plan.pod_logs_dir):
            directory.mkdir(parents=True, exist_ok=True)
        daemon_cgroups = [h / plan.cgroup_path("daemons").lstrip("/") for h in hierarchies]
        self._check_stop()

        self._spawn("containerd", containerd_argv(plan), daemon_cgroups)
        ctr = [plan.tools.ctr, "--address", str(plan.containerd_socket)]
        wait_until(
            lambda: plan.containerd_socket.exists() and _succeeds([*ctr, "version"]),
            timeout_s=CONTAINERD_TIMEOUT_S,
            what=f"containerd at {plan.containerd_socket}",
            abort=partial(self._abort_reason, "containerd"),
        )
        host.run([*ctr, "-n", "k8s.io", "images", "import", plan.pause_archive])
        self._spawn("api-proxy", api_proxy_argv(plan), daemon_cgroups)
        # Before the kubelet: pods it starts get it as their nameserver at once.
        self._spawn("coredns", coredns_argv(plan), daemon_cgroups)
        self._check_stop()

        self._spawn("kubelet", kubelet_argv(plan), daemon_cgroups)
        healthz = f"http://127.0.0.1:{plan.kubelet_healthz_port}/healthz"
        wait_until(
            lambda: http_status(healthz) == 200,
            timeout_s=KUBELET_TIMEOUT_S,
            what=f"kubelet at {healthz}",
            abort=partial(self._abort_reason, "kubelet"),
        )

    def _spawn(self, name: str, argv: tuple[str, ...], cgroups: list[Path]) -> None:
        log_path = self.plan.logs_dir / f"{name}.log"
        with log_path.open("wb") as log:
            self.children[name] = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # The supervisor is single-threaded, so this runs safely after fork.
                preexec_fn=partial(host.join_cgroups, cgroups),
            )
        logger.info("started %s (pid %d)", name, self.children[name].pid)

    def _abort_reason(self, name: str) -> str | None:
        if self._stop_requested() is not None:
            return self._stop_reason
        code = self.children[name].poll()
        if code is not None:
            return f"{name} exited with {code}; see {self.plan.logs_dir / (name + '.log')}"
        return None

    def _wait(self) -> str:
        """Until asked to stop; a daemon that dies fails the node."""
        while True:
            reason = self._stop_requested()
            if reason is not None:
                return reason
            for name, child in self.children.items():
                code = child.poll()
                if code is not None:
                    log = self.plan.logs_dir / f"{name}.log"
                    raise RuntimeError(f"{name} exited with {code}; see {log}")
            # Wakes early when the owner's pipe closes.
            select.select([sys.stdin.fileno()] if self.watch_stdin else [], [], [], 0.5)


def _become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        logger.warning("PR_SET_CHILD_SUBREAPER failed: errno %d", ctypes.get_errno())


def _succeeds(argv: list[str]) -> bool:
    try:
        host.run(argv, timeout_s=5)
    except host.HostError:
        return False
    return True


def _clean_leftovers() -> None:
    """Tear down what the machine's last real node left, if it did not finish."""
    inventory = load_inventory(INVENTORY_FILE)
    if inventory is None or inventory.clean:
        return
    logger.info(
        "cleaning what the real node in %s left (supervisor pid %d)",
        inventory.root,
        inventory.supervisor_pid,
    )
    teardown(inventory)


def _check_preconditions(plan: NodePlan) -> None:
    """Refuse to start over anything this node would take but did not make."""
    tools = plan.tools
    for tool in (plan.kubelet, tools.containerd, tools.ctr, tools.runc, tools.socat):
        if not os.access(tool, os.X_OK):
            raise RuntimeError(f"{tool} not found (make cluster-build; make host-packages)")
    if not os.access(plan.coredns, os.X_OK):
        raise RuntimeError(f"{plan.coredns} not found (make dns-build)")
    if not Path(plan.tools.cni_bin_dir, "bridge").is_file():
        raise RuntimeError(f"no CNI bridge plugin in {plan.tools.cni_bin_dir} (make host-packages)")
    taken = host.existing_cgroups(plan.cgroup)
    if taken:
        raise RuntimeError(f"cgroup {taken[0]} exists and no real node's inventory lists it")
    if host.link_exists(plan.bridge):
        raise RuntimeError(f"network interface {plan.bridge} exists and is not this node's")
    for binary in IPTABLES:
        for table in IPTABLES_TABLES:
            rules = host.iptables_rules(binary, table) or ""
            clash = chains_in(rules) & {*KUBELET_CHAINS, *GUARD_CHAINS}
            if clash:
                raise RuntimeError(
                    f"{binary} chain {sorted(clash)[0]} ({table}) exists: another kubelet runs here"
                )
    pods = ipaddress.ip_network(plan.pod_cidr)
    for route in host.ipv4_routes():
        if route != "default" and ipaddress.ip_network(route, strict=False).overlaps(pods):
            raise RuntimeError(f"pod CIDR {plan.pod_cidr} overlaps the route {route} of this host")
    mounted = host.mounts_under(Path(plan.runtime_root))
    if mounted:
        raise RuntimeError(f"{mounted[0]} is mounted and no real node's inventory lists it")
    if Path(plan.runtime_root).exists():
        raise RuntimeError(f"{plan.runtime_root} exists and no real node's inventory lists it")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tandem.devcluster.realnode")
    parser.add_argument("plan", type=Path)
    parser.add_argument("--watch-stdin", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    plan = NodePlan.model_validate_json(args.plan.read_text())
    return Supervisor(plan, watch_stdin=args.watch_stdin).run()
