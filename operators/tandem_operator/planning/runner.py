"""Run one plan in a child process, killed after a time limit.

A plan is seconds of pure-Python CPU (``tandem.sim.spec_plan``). In a thread it would
hold the GIL and slow every reconcile and watch; in a child process it runs beside the
event loop, and a plan that runs past its limit is killed rather than abandoned.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Sequence

import pydantic

from tandem.api.v1alpha1 import InferenceClusterSpec, PlanStatus
from tandem.sim.spec_plan import PlanRequest

# What the operator calls to plan a spec from a step-time table (its text), if any;
# tests pass their own.
PlanFunction = Callable[[InferenceClusterSpec, str | None], Awaitable[PlanStatus]]

PLANNER_ARGV = (sys.executable, "-m", "tandem.sim.spec_plan")
DEFAULT_TIMEOUT_SECONDS = 120.0


class PlanningFailed(Exception):
    """No plan came back: the planner ran too long, crashed or answered garbage."""


class ProcessPlanner:
    """``await planner(spec, perf_table)``: the spec's PlanStatus from ``argv`` (a
    PlanRequest on stdin, PlanStatus JSON on stdout), or :class:`PlanningFailed` saying
    why not."""

    def __init__(
        self,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_SECONDS,
        argv: Sequence[str] = PLANNER_ARGV,
    ) -> None:
        self._timeout_s = timeout_s
        self._argv = tuple(argv)

    async def __call__(self, spec: InferenceClusterSpec, perf_table: str | None) -> PlanStatus:
        request = PlanRequest(spec=spec, perf_table=perf_table)
        try:
            child = await asyncio.create_subprocess_exec(
                *self._argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:  # no process to plan in (fork refused, limits)
            raise PlanningFailed(f"the planner did not start: {exc}") from None
        try:
            stdout, stderr = await asyncio.wait_for(
                child.communicate(request.model_dump_json(by_alias=True).encode()),
                self._timeout_s,
            )
        except TimeoutError:
            raise PlanningFailed(f"planning gave up after {self._timeout_s:g} s") from None
        finally:
            if child.returncode is None:  # timed out, or the reconcile loop is stopping
                child.kill()
                await child.wait()
        if child.returncode != 0:
            last = stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise PlanningFailed(f"the planner exited with {child.returncode}: {last[0]}")
        try:
            return PlanStatus.model_validate_json(stdout)
        except pydantic.ValidationError as exc:
            raise PlanningFailed(f"the planner's answer is unreadable: {exc}") from None
