"""A local InferenceCluster for the fault suite: the real supervisor of ``tandem up``
runs it, each worker in a network namespace of its own (``netbed``), two frontends on
loopback (the supervisor's and a second replica).

The plan is ``tandem up``'s own (``plan_local``), moved into the namespaces by
``place_workers`` (pure): same argv, the worker bound to its namespace address, its
side port on :9090 like a pod's. KV moves over the TCP transport, across the bridge, so
partitions and the slow link act on it. The supervisor restarts what dies, as it does
for ``tandem up``, which is what "time to recover" measures.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tandem.api.v1alpha1 import InferenceCluster
from tandem.devcluster.ports import allocate_ports
from tandem.devcluster.processes import ProcessRecord, die_with_parent, is_running, record_of
from tandem.router.membership import Member, render_members
from tandem.router.policy import WorkerRole
from tandem.runtime.plan import LOCAL_HOST, LocalPlan, ProcessSpec, plan_local
from tandem.runtime.state import ClusterState, read_state
from tandem.runtime.supervisor import Supervisor
from tandem_dev.faults.netbed import NetBed, NetPlan, net_bed

WORKER_GRPC_PORT = 50051
WORKER_HTTP_PORT = 9090


def place_workers(plan: LocalPlan, net: NetPlan) -> LocalPlan:
    """``plan`` with every worker inside its namespace of ``net`` (pure): bound to the
    namespace address, with an HTTP side port, started through ``ip netns exec``."""

    def place(spec: ProcessSpec) -> ProcessSpec:
        host = net.host(spec.name)
        argv = list(spec.argv)
        argv[argv.index("--host") + 1] = host.address
        argv += ["--http-port", str(WORKER_HTTP_PORT)]
        env = tuple((k, v) for k, v in spec.env if k != "UCX_NET_DEVICES")
        wrapped = ("ip", "netns", "exec", host.namespace, *argv)
        return dataclasses.replace(spec, argv=wrapped, env=env, host=host.address)

    pools = {
        role: dataclasses.replace(pool, workers=tuple(place(w) for w in pool.workers))
        for role, pool in plan.pools.items()
    }
    # The membership document lists the workers at their new addresses.
    members = [
        Member(w.address, WorkerRole(w.component)) for p in pools.values() for w in p.workers
    ]
    documents = {**plan.documents, plan.members_file: render_members(members)}
    return dataclasses.replace(plan, pools=pools, documents=documents)


def _get(url: str, timeout_s: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""


def metric_sum(text: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (pure)."""
    total = 0.0
    for match in re.finditer(rf"^{name}(\{{[^}}]*\}})? (\S+)$", text, flags=re.MULTILINE):
        head = match.group(1) or ""
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(match.group(2))
    return total


@dataclass
class FaultBed:
    cluster: InferenceCluster
    net: NetBed
    supervisor: Supervisor
    frontend_ports: tuple[int, int]
    extra_frontend: subprocess.Popen[bytes]

    # ------------------------------------------------------------------ views

    @property
    def targets(self) -> list[tuple[str, int]]:
        return [(LOCAL_HOST, port) for port in self.frontend_ports]

    @property
    def model(self) -> str:
        return self.cluster.spec.model.public_name

    def state(self) -> ClusterState:
        state = read_state(self.supervisor.plan.state_dir)
        assert state is not None
        return state

    def pid_of(self, name: str) -> int:
        return self.record_of(name).pid

    def record_of(self, name: str) -> ProcessRecord:
        """Process ``name`` as it runs now (with its start time, so a reused pid never
        passes for it)."""
        if name == "frontend-b":
            return record_of(name, self.extra_frontend, _extra_frontend_log(self.supervisor.plan))
        state = self.state()
        if name == "frontend" and state.frontend is not None:
            return state.frontend.record
        return next(w.record for w in state.workers if w.name == name)

    def frontend_metrics(self) -> str:
        return "\n".join(_get(f"http://{h}:{p}/metrics")[1] for h, p in self.targets)

    def worker_metrics(self, name: str) -> str:
        return _get(f"http://{self.net.plan.host(name).address}:{WORKER_HTTP_PORT}/metrics")[1]

    def remote_prefills(self) -> float:
        text = self.frontend_metrics()
        return metric_sum(text, "tandem_router_prefill_decisions_total", path="remote")

    def decisions(self) -> Counter[str]:
        """The routers' prefill decisions so far, as "path/reason" -> count."""
        found: Counter[str] = Counter()
        pattern = r'^tandem_router_prefill_decisions_total\{path="(\w+)",reason="(\w+)"\} (\S+)$'
        for path, reason, value in re.findall(pattern, self.frontend_metrics(), re.MULTILINE):
            found[f"{path}/{reason}"] += int(float(value))
        return found

    def all_ready(self) -> bool:
        """Both frontends ready and each sees every worker healthy."""
        expected = len(self.supervisor.plan.workers)
        for host, port in self.targets:
            status, body = _get(f"http://{host}:{port}/readyz")
            if status != 200:
                return False
            workers = json.loads(body)["workers"]
            if sum(1 for w in workers if w["healthy"]) < expected:
                return False
        return True

    # ------------------------------------------------------------------ faults

    def kill(self, name: str) -> float:
        """SIGKILL process ``name``; returns when it was dead (monotonic). Not when the
        signal was sent: until the kernel has torn the process down its listening
        sockets still accept, so a request sent in between is the dying one's, not one
        sent while it was down."""
        record = self.record_of(name)
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signal.SIGKILL)
        deadline = time.monotonic() + KILL_TIMEOUT_S
        while is_running(record):  # a zombie waiting for the supervisor counts as dead
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} (pid {record.pid}) survived SIGKILL")
            time.sleep(0.002)
        return time.monotonic()


KILL_TIMEOUT_S = 10.0


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 120.0) -> float:
    """Poll ``check`` until true; returns when it became true (monotonic)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic()


def _extra_frontend_log(plan: LocalPlan) -> Path:
    return plan.frontend.log.with_name("frontend-b.log")


def _start_frontend(plan: LocalPlan, port: int) -> subprocess.Popen[bytes]:
    argv = list(plan.frontend.argv)
    argv[argv.index("--port") + 1] = str(port)
    with _extra_frontend_log(plan).open("ab") as out:
        return subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=die_with_parent,
        )  # fmt: skip


@contextlib.contextmanager
def fault_bed(
    cluster: InferenceCluster, state_dir: Path, *, progress: Callable[[str], None] = lambda _: None
) -> Iterator[FaultBed]:
    """Run ``cluster`` (KV over TCP) with its workers in namespaces and two frontends;
    everything is stopped and removed on exit."""
    roles = (cluster.spec.prefill, cluster.spec.decode)
    names: Sequence[str] = [
        f"{role}-{i}" for role, pool in zip(("prefill", "decode"), roles, strict=True)
        for i in range(pool.replicas)
    ]  # fmt: skip
    with net_bed(names) as net:
        front, extra = allocate_ports(2)
        plan = plan_local(
            cluster,
            state_dir=state_dir,
            frontend_port=front,
            worker_ports=[WORKER_GRPC_PORT] * len(names),
            python=sys.executable,
            kv_backend="tcp",
        )
        supervisor = Supervisor(place_workers(plan, net.plan), cluster, progress=progress,
                                python=sys.executable, stop_grace_s=5.0)  # fmt: skip
        stopping = threading.Event()
        watcher = threading.Thread(target=supervisor.supervise, args=(stopping.is_set, 0.2))
        bed: FaultBed | None = None
        try:
            supervisor.start()
            watcher.start()
            bed = FaultBed(cluster, net, supervisor, (front, extra),
                           _start_frontend(supervisor.plan, extra))  # fmt: skip
            wait_for(bed.all_ready, "both frontends to see every worker", 120)
            yield bed
        finally:
            stopping.set()
            if watcher.is_alive():
                watcher.join()
            extra_frontend = bed.extra_frontend if bed is not None else None
            if extra_frontend is not None and extra_frontend.poll() is None:
                extra_frontend.terminate()
                try:
                    extra_frontend.wait(10)
                except subprocess.TimeoutExpired:
                    extra_frontend.kill()
                    extra_frontend.wait()
            supervisor.stop()
