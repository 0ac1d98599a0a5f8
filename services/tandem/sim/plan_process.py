"""Plan a spec in a child process (``python -m tandem.sim.spec_plan``), killed after a
time limit: what the operator and ``tandem up`` both run.

A plan is seconds of pure-Python CPU. In a thread it would hold the GIL and slow the
caller's loop (the operator's reconciles, the local supervisor's rounds); in a child
process it runs beside them, and a plan that runs past its limit is killed rather than
abandoned. The operator drives the child with asyncio; :func:`plan_in_child` is the
blocking form for callers on a thread of their own.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

import pydantic

from tandem.api.v1alpha1 import InferenceClusterSpec, PlanStatus
from tandem.sim.spec_plan import PlanRequest

PLANNER_ARGV = (sys.executable, "-m", "tandem.sim.spec_plan")
DEFAULT_TIMEOUT_SECONDS = 120.0


class PlanningFailed(Exception):
    """No plan came back: the planner ran too long, crashed or answered garbage."""


def encode_request(spec: InferenceClusterSpec, perf_table: str | None) -> bytes:
    """The child's stdin."""
    return PlanRequest(spec=spec, perf_table=perf_table).model_dump_json(by_alias=True).encode()


def read_answer(returncode: int, stdout: bytes, stderr: bytes) -> PlanStatus:
    """The child's PlanStatus, or :class:`PlanningFailed` saying why there is none."""
    if returncode != 0:
        last = stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise PlanningFailed(f"the planner exited with {returncode}: {last[0]}")
    try:
        return PlanStatus.model_validate_json(stdout)
    except pydantic.ValidationError as exc:
        raise PlanningFailed(f"the planner's answer is unreadable: {exc}") from None


def plan_in_child(
    spec: InferenceClusterSpec,
    perf_table: str | None = None,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_SECONDS,
    argv: Sequence[str] = PLANNER_ARGV,
) -> PlanStatus:
    """``spec``'s PlanStatus from a child process (blocking, at most ``timeout_s``)."""
    try:
        done = subprocess.run(
            list(argv),
            input=encode_request(spec, perf_table),
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:  # subprocess.run killed the child
        raise PlanningFailed(f"planning gave up after {timeout_s:g} s") from None
    except OSError as exc:  # no process to plan in (fork refused, limits)
        raise PlanningFailed(f"the planner did not start: {exc}") from None
    return read_answer(done.returncode, done.stdout, done.stderr)
