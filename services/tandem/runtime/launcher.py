"""``tandem up`` / ``down`` as functions: run a cluster in the foreground, detach one, or
stop one recorded in its state directory."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit

from tandem.api.v1alpha1 import InferenceCluster, KvBackend, PlanStatus
from tandem.devcluster.ports import allocate_ports
from tandem.devcluster.processes import ProcessRecord, is_running, stop
from tandem.errors import already_running
from tandem.portcheck import PortError, PortInUseError, check_port_free
from tandem.runtime.autoscaler import LocalAutoscaler, autoscales_locally
from tandem.runtime.plan import LOCAL_HOST, WORKER_MODULE, count_workers, plan_local
from tandem.runtime.replanner import LocalReplanner, plan_at_start, plans
from tandem.runtime.state import (
    ClusterState,
    Phase,
    cluster_dir,
    list_clusters,
    read_state,
    state_path,
)
from tandem.runtime.supervisor import StartupError, Supervisor
from tandem.security import CredentialStore, Identity, identity_dir
from tandem.sim.plan_process import plan_in_child

Progress = Callable[[str], None]


class LaunchError(RuntimeError):
    """``tandem up`` cannot proceed (already running, port taken); message says why."""


class _Stop(Exception):
    """SIGTERM or SIGHUP arrived: shut down like Ctrl-C."""


def _running_message(name: str, state: ClusterState) -> str:
    return already_running(
        f"cluster {name!r}",
        pid=state.supervisor_pid,
        port=urlsplit(state.endpoint).port,
        fix=f"`tandem down --name {name}`",
    )


def check_not_running(directory: Path, name: str) -> None:
    state = read_state(directory)
    if state is not None and is_running(state.supervisor):
        raise LaunchError(_running_message(name, state))


def _claim_state_dir(name: str, home: Path | None) -> Path:
    """The cluster's state directory, created; LaunchError if that cluster still runs."""
    directory = cluster_dir(name, home)
    check_not_running(directory, name)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


_OTHER_PORT = "pass --port N (0 picks a free one)"
# Local clusters take no API keys: they listen on loopback alone (the frontend refuses
# to serve keyless anywhere else), while an in-cluster frontend requires keys.
KEYLESS_NOTE = (
    "no API keys: the endpoint listens on 127.0.0.1 only, so anyone on this machine may "
    "use it (in Kubernetes, keys are required: docs/security.md)"
)


def choose_port(requested: int, home: Path | None = None) -> int:
    """``requested``, once it is free to listen on (0: any free port); else LaunchError
    naming what holds it (another local cluster when it is one)."""
    if requested == 0:
        return allocate_ports(1)[0]
    try:
        check_port_free(LOCAL_HOST, requested)
    except PortInUseError as exc:
        owner = _local_cluster_of(exc.holder.pid, home) if exc.holder else None
        if owner is None:
            raise LaunchError(f"{exc}: stop it, or {_OTHER_PORT}") from None
        name, state = owner
        raise LaunchError(
            f"{_running_message(name, state)}; or {_OTHER_PORT} to run beside it"
        ) from None
    except PortError as exc:
        raise LaunchError(f"{exc}; {_OTHER_PORT}") from None
    return requested


def _local_cluster_of(pid: int, home: Path | None) -> tuple[str, ClusterState] | None:
    """The local cluster whose supervisor or frontend is process ``pid``, if any."""
    for name in list_clusters(home):
        state = read_state(cluster_dir(name, home))
        if state is None:
            continue
        pids = {state.supervisor_pid, *([state.frontend.pid] if state.frontend else [])}
        if pid in pids:
            return name, state
    return None


def _kv_backend(cluster: InferenceCluster, progress: Progress) -> str | None:
    """Keep the spec's backend, except NIXL where it is not installed (then TCP)."""
    from tandem.kv import nixl_available

    if cluster.spec.kv_transfer.backend is KvBackend.NIXL and not nixl_available():
        progress("NIXL is not installed here: moving KV over TCP instead")
        return KvBackend.TCP.value
    return None


def run_foreground(
    cluster: InferenceCluster,
    *,
    port: int,
    progress: Progress,
    home: Path | None = None,
    startup_timeout_s: float = 600.0,
    worker_module: str = WORKER_MODULE,
    perf_table: str | None = None,
    detached: bool = False,
) -> int:
    """Start the cluster, serve until Ctrl-C/SIGTERM, then stop everything. Exit code.
    ``perf_table``: the text of the step-time table its plans are made from (``tandem
    profile``'s, for the reference engine). ``detached``: started by ``detach``, which
    tells the user where the endpoint is (and how to stop it) itself."""
    name = cluster.metadata.name
    directory = _claim_state_dir(name, home)
    written = cluster
    planned: PlanStatus | None = None
    planner = functools.partial(plan_in_child, perf_table=perf_table)
    if plans(cluster):  # before anything starts: the processes are the plan's
        planned, cluster = plan_at_start(written, progress=progress, plan=planner)
    plan = plan_local(
        cluster,
        state_dir=directory,
        frontend_port=choose_port(port, home),
        worker_ports=allocate_ports(count_workers(cluster)),
        python=sys.executable,
        worker_module=worker_module,
        kv_backend=_kv_backend(cluster, progress),
    )
    supervisor = Supervisor(
        plan, cluster, progress=progress, python=sys.executable,
        startup_timeout_s=startup_timeout_s,
    )  # fmt: skip
    code = 0
    autoscaler: LocalAutoscaler | None = None
    replanner: LocalReplanner | None = None

    def start_hooks() -> None:
        start_autoscaler()
        start_replanner()

    def start_replanner() -> None:
        # Before running too, for the same reason: planning.json is this run's.
        nonlocal replanner
        if planned is not None:
            replanner = LocalReplanner(
                written,
                planned,
                supervisor,
                frontend_url=plan.endpoint.removesuffix("/v1"),
                state_dir=directory,
                on_reshape=autoscaler.reconfigure if autoscaler is not None else lambda c: None,
                plan_function=planner,
                progress=progress,
                credentials=CredentialStore(identity_dir(plan.credentials_dir, Identity.FRONTEND)),
            )

    def start_autoscaler() -> None:
        # Before the state says running (its credentials exist by then): its fresh record
        # replaces an earlier run's, so no reader of a running cluster sees a stale or
        # missing autoscaling.json.
        nonlocal autoscaler
        if autoscales_locally(cluster):
            autoscaler = LocalAutoscaler(
                cluster,
                supervisor,
                frontend_url=plan.endpoint.removesuffix("/v1"),
                state_dir=directory,
                progress=progress,
                # Drain is not worker-only: the supervisor calls it as the frontend.
                credentials=CredentialStore(identity_dir(plan.credentials_dir, Identity.FRONTEND)),
            )

    with _stop_on_signals():
        try:
            supervisor.start(before_running=start_hooks)
            if not detached:
                progress(f"endpoint: {plan.endpoint}  (Ctrl-C or `tandem down --name {name}`)")
                progress(KEYLESS_NOTE)
            if autoscaler is not None:
                supervisor.tick_hooks.append(autoscaler)
                interval = cluster.spec.autoscaling.interval_seconds
                progress(f"autoscaling every {interval}s (see `tandem status --name {name}`)")
            elif cluster.spec.autoscaling.enabled:
                progress("autoscaling mode external: no HPA/KEDA here, pools keep their size")
            if replanner is not None:
                supervisor.tick_hooks.append(replanner)
            supervisor.supervise(lambda: False)
        except (KeyboardInterrupt, _Stop):
            progress("stopping")
        except StartupError as exc:
            progress(f"error: {exc}")
            supervisor.fail(str(exc))
            code = 1
        finally:
            with _signals_ignored():
                supervisor.stop()
                if autoscaler is not None:
                    autoscaler.close()
                if replanner is not None:
                    replanner.close()
                if code == 0:
                    state_path(directory).unlink(missing_ok=True)
    progress("stopped")
    return code


def detach(
    cluster_file: Path,
    cluster: InferenceCluster,
    *,
    port: int,
    progress: Progress,
    home: Path | None = None,
    timeout_s: float = 900.0,
    worker_module: str = WORKER_MODULE,
    extra_argv: Sequence[str] = (),
) -> int:
    """Start a supervisor in the background; relay its progress until ready or failed.
    ``extra_argv``: more of ``python -m tandem.runtime``'s flags (tracing, a table)."""
    name = cluster.metadata.name
    directory = _claim_state_dir(name, home)
    if port:  # refuse a taken port here, in one line, rather than in the background's log
        choose_port(port, home)
    state_path(directory).unlink(missing_ok=True)
    log_path = directory / "supervisor.log"
    env = dict(os.environ)
    if home is not None:
        env["TANDEM_HOME"] = str(home)
    with log_path.open("ab") as log:
        offset = log.tell()
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tandem.runtime",
                "-f",
                str(cluster_file),
                "--port",
                str(port),
                "--worker-module",
                worker_module,
                "--detached",
                *extra_argv,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            env=env,
        )
    deadline = time.monotonic() + timeout_s
    follower = _LogFollower(log_path, offset)
    while time.monotonic() < deadline:
        for line in follower.new_lines():
            progress(line)
        state = read_state(directory)
        if state is not None and state.phase is Phase.RUNNING:
            for line in follower.new_lines():
                progress(line)
            progress(f"endpoint: {state.endpoint}  (stop with `tandem down --name {name}`)")
            progress(KEYLESS_NOTE)
            return 0
        if child.poll() is not None or (state is not None and state.phase is Phase.FAILED):
            for line in follower.new_lines():
                progress(line)
            break
        time.sleep(0.1)
    progress(f"error: the cluster did not start; see {log_path}")
    if child.poll() is None:
        child.terminate()
    return 1


def down(name: str, *, progress: Progress, home: Path | None = None, grace_s: float = 30.0) -> int:
    """Stop a recorded cluster: its supervisor, then any recorded process still alive."""
    directory = cluster_dir(name, home)
    state = read_state(directory)
    if state is None:
        progress(f"cluster {name!r} is not running")
        return 0
    progress(f"stopping {name!r}")
    if is_running(state.supervisor):
        # Signal the supervisor itself (it need not lead a process group when it runs
        # in a terminal); it stops its children, which do lead their own groups.
        _terminate(state.supervisor, grace_s)
    leftovers = [p for p in [state.frontend, *state.workers] if p is not None]
    for process in leftovers:  # the supervisor stops them; this covers a killed supervisor
        stop(process.record, grace_s=5.0)
    state_path(directory).unlink(missing_ok=True)
    progress("stopped")
    return 0


def _terminate(record: ProcessRecord, grace_s: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while is_running(record):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.pid, signal.SIGKILL)
            break
        time.sleep(0.05)


class _LogFollower:
    """Complete lines appended to a file after ``offset``."""

    def __init__(self, path: Path, offset: int) -> None:
        self._path, self._offset, self._partial = path, offset, ""

    def new_lines(self) -> list[str]:
        with self._path.open("rb") as log:
            log.seek(self._offset)
            chunk = log.read()
        self._offset += len(chunk)
        *lines, self._partial = (self._partial + chunk.decode(errors="replace")).split("\n")
        return [line for line in lines if line]


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise _Stop(signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """A second Ctrl-C must not abort the cleanup that prevents orphans."""
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in sigs}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
