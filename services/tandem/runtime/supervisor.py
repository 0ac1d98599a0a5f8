"""The thin shell that makes a ``LocalPlan`` real: start, watch, scale, stop processes.

Every child runs in its own session (its pid is its process group, so stopping signals
everything it forked) and gets ``PR_SET_PDEATHSIG``: if the supervisor dies, even by
SIGKILL, the kernel sends each child SIGTERM -- no orphans. A child counts as started
when it prints ``READY <port>``; the cluster is ready when the frontend's ``/readyz``
says a decode worker is healthy. Workers that die are restarted with back-off
(``backoff``), as a Deployment's kubelet would.

Scaling seam (for the local autoscaler): :meth:`Supervisor.scale` adds workers (new
ports, in the membership file as starting at once, so the router knows capacity is on
its way, and as ready once they are) or retires the highest-numbered ones
(removed from membership first, so the router stops routing there, then stopped).
:meth:`Supervisor.retire` and :meth:`Supervisor.stop_retired` split a retirement in
two, so the caller can drain chosen workers in between without blocking supervision:
a retiring worker is out of the membership and never restarted, but still recorded in
the state file (``tandem down`` stops it) and stopped with everything else.
:meth:`Supervisor.add_workers` starts workers whatever the pool's bounds, and
:meth:`Supervisor.reshape` makes a re-planned spec the one later workers run (the
re-planner's seam). Functions registered in ``tick_hooks`` run on every supervision round.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from tandem.api.v1alpha1 import InferenceCluster, PoolRole
from tandem.devcluster.ports import allocate_ports
from tandem.devcluster.processes import die_with_parent, record_of, stop
from tandem.router.membership import Member, write_members
from tandem.router.policy import WorkerRole
from tandem.runtime.backoff import crashes_in_a_row, restart_delay
from tandem.runtime.plan import LocalPlan, ProcessSpec, plan_worker
from tandem.runtime.state import ClusterState, Phase, ProcessState, write_state
from tandem.security import issue, write_identities
from tandem.security.credentials import utc_now

_POLL_S = 0.1
_READY_PREFIX = "READY "


class StartupError(RuntimeError):
    """A process exited or never became ready; the message points at its log."""


@dataclass(slots=True)
class _Child:
    spec: ProcessSpec
    popen: subprocess.Popen[bytes]
    log_offset: int  # where this incarnation's output starts in the log
    started_at: float  # time.monotonic() at launch
    crashes: int = 0  # in a row, this incarnation's death not counted yet (backoff)
    restart_at: float | None = None

    def state(self, *, retiring: bool = False) -> ProcessState:
        record = record_of(self.spec.name, self.popen, self.spec.log)
        return ProcessState(
            name=self.spec.name,
            component=self.spec.component,
            port=self.spec.port,
            pid=record.pid,
            start_ticks=record.start_ticks,
            log=str(self.spec.log),
            retiring=retiring,
        )


class Supervisor:
    def __init__(
        self,
        plan: LocalPlan,
        cluster: InferenceCluster,
        *,
        progress: Callable[[str], None],
        python: str,
        startup_timeout_s: float = 600.0,
        stop_grace_s: float = 15.0,
        now: Callable[[], datetime] = utc_now,
    ) -> None:
        self.plan = plan
        self._now = now
        self._cluster = cluster
        self._progress = progress
        self._python = python
        self._startup_timeout_s = startup_timeout_s
        self._stop_grace_s = stop_grace_s
        self._children: dict[str, _Child] = {}
        self._retiring: dict[str, _Child] = {}  # out of membership, draining
        self._next_index = {role: len(p.workers) for role, p in plan.pools.items()}
        self._phase = Phase.STARTING
        self._message = ""
        self.tick_hooks: list[Callable[[Supervisor], None]] = []

    # ------------------------------------------------------------------ lifecycle

    def start(self, before_running: Callable[[], None] = lambda: None) -> None:
        """Write documents and fresh credentials, start workers then the frontend, return
        once ready. ``before_running`` runs once all are up, before the state says
        running: what readers of a running cluster expect (its autoscaling record)."""
        plan = self.plan
        (plan.state_dir / "logs").mkdir(parents=True, exist_ok=True)
        for path, text in plan.documents.items():
            path.write_text(text)
        write_identities(plan.credentials_dir, issue(plan.cluster, self._now()))
        self._save()
        deadline = time.monotonic() + self._startup_timeout_s
        sizes = ", ".join(f"{len(p.workers)} {r.value}" for r, p in plan.pools.items())
        self._progress(f"starting {plan.cluster!r}: {sizes} worker(s) and a frontend")
        for spec in plan.workers:
            self._launch(spec)
        self._save()
        self._await_started([c for c in self._children.values()], deadline)
        self._launch(plan.frontend)
        self._save()
        self._await_started([self._children["frontend"]], deadline)
        self._progress("waiting for the frontend to see a healthy decode worker")
        while not frontend_ready(plan.endpoint):
            self._check_alive([self._children["frontend"]])
            refused = frontend_refusals(plan.endpoint)
            if refused:  # never heals by waiting: the processes disagree on the model
                raise StartupError(f"the frontend refuses a worker: {refused[0]}")
            if time.monotonic() > deadline:
                raise StartupError("the frontend never became ready (see logs/frontend.log)")
            time.sleep(_POLL_S)
        before_running()
        # Said before it is recorded: `tandem up --detach` stops relaying this log once
        # the state says running, so the line must be in the log by then.
        self._progress(f"ready: {plan.endpoint}")
        self._phase = Phase.RUNNING
        self._save()

    def supervise(self, should_stop: Callable[[], bool], interval_s: float = 0.5) -> None:
        """Restart dead children and run tick hooks until ``should_stop()``."""
        while not should_stop():
            self._restart_dead()
            for hook in self.tick_hooks:
                hook(self)
            time.sleep(interval_s)

    def stop(self) -> None:
        """Frontend first (no new requests), then all workers; SIGKILL after the grace."""
        self._phase = Phase.STOPPING
        self._save()
        frontend = self._children.pop("frontend", None)
        if frontend is not None:
            self._stop_children([frontend])
        self._stop_children([*self._children.values(), *self._retiring.values()])
        self._children.clear()
        self._retiring.clear()

    def fail(self, message: str) -> None:
        self._phase, self._message = Phase.FAILED, message
        self._save()

    # ------------------------------------------------------------------ scaling seam

    def pool_size(self, role: PoolRole) -> int:
        return sum(1 for c in self._children.values() if c.spec.component == role.value)

    def workers(self, role: PoolRole) -> list[ProcessSpec]:
        """The pool's workers in membership (retiring ones excluded), by index."""
        specs = (c.spec for c in self._children.values() if c.spec.component == role.value)
        return sorted(specs, key=_index)

    def retire(self, names: Sequence[str]) -> list[ProcessSpec]:
        """Take workers out of the membership file (the router stops routing to them
        within a health round) and stop restarting them; they keep running until
        :meth:`stop_retired`. Unknown names are ignored."""
        retired = [self._children.pop(n) for n in names if n in self._children and n != "frontend"]
        for child in retired:
            self._retiring[child.spec.name] = child
        if retired:
            self._write_members()
            self._save()
        return [c.spec for c in retired]

    def stop_retired(self, names: Sequence[str]) -> None:
        """SIGTERM retired workers (they drain what is left), SIGKILL after the grace."""
        stopping = [self._retiring.pop(n) for n in names if n in self._retiring]
        if stopping:
            self._stop_children(stopping)
            self._save()

    def scale(self, role: PoolRole, replicas: int) -> None:
        """Grow or shrink a pool to ``replicas`` workers (blocking until done)."""
        pool = self.plan.pools[role]
        replicas = max(pool.min_replicas, min(pool.max_replicas, replicas))
        current = sorted(
            (c for c in self._children.values() if c.spec.component == role.value),
            key=lambda c: _index(c.spec),
        )
        if replicas > len(current):
            self.add_workers(role, replicas - len(current))
            return
        if replicas < len(current):
            retired = current[replicas:]
            for child in retired:
                del self._children[child.spec.name]
            self._write_members()  # the router stops routing there within a health round
            self._stop_children(retired)
        self._save()

    def add_workers(self, role: PoolRole, count: int) -> list[ProcessSpec]:
        """Start ``count`` more workers of ``role`` (the current spec's), blocking until
        they are up; they join the membership file as starting at once, as ready then."""
        added = []
        for port in allocate_ports(count):
            index = self._next_index[role]
            self._next_index[role] += 1
            spec = plan_worker(
                self._cluster,
                role,
                index,
                port,
                state_dir=self.plan.state_dir,
                python=self._python,
                worker_module=self.plan.worker_module,
                kv_backend=self.plan.kv_backend,
            )
            added.append(self._launch(spec))
        # Workers that never start stay listed as starting, as a crash-looping pod's
        # endpoint stays not ready: a prompt waits for them at most its limit.
        self._write_members(starting={c.spec.name for c in added})
        self._await_started(added, time.monotonic() + self._startup_timeout_s)
        self._write_members()
        self._save()
        return [c.spec for c in added]

    def reshape(self, cluster: InferenceCluster) -> None:
        """Run ``cluster``'s spec from now on: workers started later get its command
        line, and :meth:`scale` keeps to its pools' bounds. Running workers are left
        alone (the re-planner rolls them)."""
        self._cluster = cluster
        bounds = {PoolRole.PREFILL: cluster.spec.prefill, PoolRole.DECODE: cluster.spec.decode}
        self.plan = dataclasses.replace(
            self.plan,
            pools={
                role: dataclasses.replace(
                    pool,
                    min_replicas=bounds[role].min_replicas,
                    max_replicas=bounds[role].max_replicas,
                )
                for role, pool in self.plan.pools.items()
            },
        )

    # ------------------------------------------------------------------ internals

    def _launch(self, spec: ProcessSpec) -> _Child:
        spec.log.parent.mkdir(parents=True, exist_ok=True)
        offset = spec.log.stat().st_size if spec.log.exists() else 0
        with spec.log.open("ab") as log:
            popen = subprocess.Popen(
                list(spec.argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                env={**os.environ, **dict(spec.env)},
                preexec_fn=die_with_parent,  # only calls prctl(2)
            )
        child = _Child(spec=spec, popen=popen, log_offset=offset, started_at=time.monotonic())
        self._children[spec.name] = child
        return child

    def _await_started(self, children: list[_Child], deadline: float) -> None:
        waiting = {c.spec.name: c for c in children}
        started = time.monotonic()
        while waiting:
            for name, child in list(waiting.items()):
                if _printed_ready(child):
                    del waiting[name]
                    took = time.monotonic() - started
                    self._progress(f"  {name:<12} {child.spec.address:<22} up ({took:.1f}s)")
            self._check_alive(list(waiting.values()))
            if waiting and time.monotonic() > deadline:
                names = ", ".join(sorted(waiting))
                raise StartupError(f"not ready before the deadline: {names} (see logs/)")
            if waiting:
                time.sleep(_POLL_S)

    def _check_alive(self, children: list[_Child]) -> None:
        for child in children:
            code = child.popen.poll()
            if code is not None:
                raise StartupError(
                    f"{child.spec.name} exited with status {code} while starting; "
                    f"last lines of {child.spec.log}:\n{_tail(child.spec.log)}"
                )

    def _restart_dead(self) -> None:
        now = time.monotonic()
        for child in list(self._children.values()):
            if child.popen.poll() is None:
                continue
            if child.restart_at is None:
                child.crashes = crashes_in_a_row(child.crashes, now - child.started_at)
                delay = restart_delay(child.crashes)
                child.restart_at = now + delay
                self._progress(
                    f"{child.spec.name} exited ({child.popen.returncode}); restart in {delay:.0f}s"
                )
            elif now >= child.restart_at:
                replacement = self._launch(child.spec)
                replacement.crashes = child.crashes
                self._save()

    def _stop_children(self, children: list[_Child]) -> None:
        for child in children:  # signal everyone first so they stop in parallel
            if child.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.popen.pid, signal.SIGTERM)
        for child in children:
            stop(
                record_of(child.spec.name, child.popen, child.spec.log), grace_s=self._stop_grace_s
            )
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(timeout=1)

    def _write_members(self, starting: AbstractSet[str] = frozenset()) -> None:
        """Every worker in the file; those named in ``starting`` as not ready yet."""
        members = [
            Member(c.spec.address, WorkerRole(c.spec.component), c.spec.name in starting)
            for c in self._children.values()
            if c.spec.component != "frontend"
        ]
        write_members(self.plan.members_file, members)

    def _save(self) -> None:
        supervisor = os.getpid()
        ticks = _start_ticks(supervisor)
        frontend = self._children.get("frontend")
        write_state(
            self.plan.state_dir,
            ClusterState(
                cluster=self.plan.cluster,
                phase=self._phase,
                endpoint=self.plan.endpoint,
                supervisor_pid=supervisor,
                supervisor_start_ticks=ticks,
                frontend=frontend.state() if frontend else None,
                workers=[
                    c.state(retiring=n in self._retiring)
                    for n, c in sorted({**self._children, **self._retiring}.items())
                    if n != "frontend"
                ],
                message=self._message,
            ),
        )


def _index(spec: ProcessSpec) -> int:
    return int(spec.name.rsplit("-", 1)[1])


def frontend_ready(endpoint: str, timeout_s: float = 1.0) -> bool:
    url = endpoint.removesuffix("/v1") + "/readyz"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def frontend_refusals(endpoint: str, timeout_s: float = 1.0) -> list[str]:
    """Why the frontend refuses workers for good (a tokenizer other than its own)."""
    url = endpoint.removesuffix("/v1") + "/readyz"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as error:  # 503 while not ready still has the body
        try:
            body = json.loads(error.read())
        except ValueError:
            return []
    except (urllib.error.URLError, OSError, ValueError):
        return []
    workers = body.get("workers", []) if isinstance(body, dict) else []
    return [
        f"{w.get('address')}: {w['last_error']}"
        for w in workers
        if isinstance(w, dict) and "tokenizer mismatch" in str(w.get("last_error", ""))
    ]


def _printed_ready(child: _Child) -> bool:
    try:
        with child.spec.log.open("rb") as log:
            log.seek(child.log_offset)
            output = log.read().decode(errors="replace")
    except OSError:
        return False
    return any(line.startswith(_READY_PREFIX) for line in output.splitlines())


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _start_ticks(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return int(raw[raw.rindex(")") + 2 :].split()[19])
