"""A ``tandem up`` plan's processes, run for a benchmark: the workers once, frontends
as many times and in as many replicas as the benchmark's cases need.

The command lines, environments and documents are the plan's (``plan_local``), so the
processes are what ``tandem up`` runs; unlike the runtime's ``Supervisor``, nothing is
restarted, each worker also serves ``/metrics`` (``--http-port``), and a frontend can
be another program with the frontend's arguments (a benchmark's baseline). Every
process is tied to this one (it dies with it) and stopped on exit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from tandem.devcluster.ports import allocate_ports
from tandem.devcluster.processes import ProcessRecord, record_of, spawn, stop
from tandem.runtime.plan import LocalPlan, ProcessSpec
from tandem.runtime.supervisor import frontend_ready

FRONTEND = "tandem.frontend"


@dataclass(frozen=True, slots=True)
class _Process:
    popen: subprocess.Popen[bytes]
    record: ProcessRecord


def _start(spec: ProcessSpec, *extra: str) -> _Process:
    """``spec`` as the runtime would run it, plus ``extra`` arguments; stopped if this
    process dies."""
    argv = (*spec.argv, *extra)
    popen = spawn(spec.name, argv, spec.log, tie_to_parent=True, env=dict(spec.env))
    return _Process(popen, record_of(spec.name, popen, spec.log))


def _await(process: _Process, ready: Callable[[], bool], deadline: float) -> None:
    while not ready():
        if process.popen.poll() is not None or time.monotonic() > deadline:
            log = Path(process.record.log).read_text(errors="replace")
            tail = "\n".join(log.splitlines()[-15:])
            raise RuntimeError(f"{process.record.name} did not start:\n{tail}")
        time.sleep(0.2)


def _printed_ready(process: _Process) -> bool:
    text = Path(process.record.log).read_text(errors="replace")
    return any(line.startswith("READY ") for line in text.splitlines())


@contextlib.contextmanager
def run_workers(plan: LocalPlan, startup_s: float = 300.0) -> Iterator[list[str]]:
    """The plan's workers, each also serving ``/metrics``; yields the metrics URLs."""
    metrics_ports = allocate_ports(len(plan.workers))
    started: list[_Process] = []
    try:
        for spec, port in zip(plan.workers, metrics_ports, strict=True):
            started.append(_start(spec, "--http-port", str(port)))
        deadline = time.monotonic() + startup_s
        for process in started:
            _await(process, partial(_printed_ready, process), deadline)
        yield [f"http://127.0.0.1:{port}/metrics" for port in metrics_ports]
    finally:
        _stop(started)


@contextlib.contextmanager
def run_frontends(
    groups: Sequence[tuple[LocalPlan, str, int]], startup_s: float = 300.0
) -> Iterator[list[list[str]]]:
    """For each (plan, program, replicas) group: ``replicas`` frontend processes with
    the plan's configuration (a Service's pods), running ``python -m program`` in place
    of ``tandem.frontend``. All start at once; yields each group's endpoints."""
    started: list[_Process] = []
    groups_endpoints: list[list[str]] = []
    try:
        for group, (plan, program, replicas) in enumerate(groups):
            endpoints = []
            for index, port in enumerate(allocate_ports(replicas)):
                argv = [program if a == FRONTEND else a for a in plan.frontend.argv]
                argv[argv.index("--port") + 1] = str(port)
                spec = dataclasses.replace(
                    plan.frontend,
                    name=f"frontend-{group}-{index}",
                    argv=tuple(argv),
                    port=port,
                    log=plan.state_dir / "logs" / f"frontend-{index}.log",
                )
                started.append(_start(spec))
                endpoints.append(f"http://127.0.0.1:{port}/v1")
            groups_endpoints.append(endpoints)
        deadline = time.monotonic() + startup_s
        flat = [e for endpoints in groups_endpoints for e in endpoints]
        for process, endpoint in zip(started, flat, strict=True):
            _await(process, partial(frontend_ready, endpoint), deadline)
        yield groups_endpoints
    finally:
        _stop(started)


def _stop(processes: Sequence[_Process]) -> None:
    for process in processes:
        stop(process.record, grace_s=15.0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.popen.wait(timeout=1)
