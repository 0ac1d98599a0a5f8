"""Run one plan in a child process, killed after a time limit, from the event loop
(``tandem.sim.plan_process`` says why a child, and reads its answer)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from tandem.api.v1alpha1 import InferenceClusterSpec, PlanStatus
from tandem.sim.plan_process import (
    DEFAULT_TIMEOUT_SECONDS,
    PLANNER_ARGV,
    PlanningFailed,
    encode_request,
    read_answer,
)

# What the operator calls to plan a spec from a step-time table (its text), if any;
# tests pass their own.
PlanFunction = Callable[[InferenceClusterSpec, str | None], Awaitable[PlanStatus]]

__all__ = ["DEFAULT_TIMEOUT_SECONDS", "PlanFunction", "PlanningFailed", "ProcessPlanner"]


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
                child.communicate(encode_request(spec, perf_table)),
                self._timeout_s,
            )
        except TimeoutError:
            raise PlanningFailed(f"planning gave up after {self._timeout_s:g} s") from None
        finally:
            if child.returncode is None:  # timed out, or the reconcile loop is stopping
                child.kill()
                await child.wait()
        return read_answer(child.returncode or 0, stdout, stderr)
