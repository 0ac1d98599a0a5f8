"""Wall time for modelled time: a step that models ``d`` seconds ends ``d / speedup``
wall seconds after it began, whatever the Python work of the step took, so the engine's
own bookkeeping is hidden inside the modelled time -- until it does not fit.

``Pacer`` keeps the books that say when the plumbing, not the model, sets the pace:
*overrun* is wall time a step took beyond its modelled share (the step's Python work
was slower than the GPU it models), *gaps* the wall time between a step's end and the
next step's start while work was waiting (the event loop, gRPC and the frontend did
not feed the engine in time). Both are zero in a faithful run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PacingReport:
    steps: int
    modelled_s: float  # GPU time the steps model
    wall_s: float  # wall time from the first step's start to the last step's end
    overrun_s: float
    gap_s: float


class Pacer:
    def __init__(
        self,
        speedup: float,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if speedup <= 0:
            raise ValueError("speedup must be > 0")
        self.speedup = speedup
        self._clock, self._sleep = clock, sleep
        self._first: float | None = None
        self._last_end: float | None = None
        self.steps = 0
        self.modelled_s = self.overrun_s = self.gap_s = 0.0

    def now(self) -> float:
        return self._clock()

    def finish_step(self, started: float, modelled_s: float, *, work_waited: bool) -> None:
        """End a step that began at ``started`` (``now()``) and models ``modelled_s``;
        ``work_waited``: work was pending since the previous step ended (its gap
        counts)."""
        if self._first is None:
            self._first = started
        elif work_waited and self._last_end is not None:
            self.gap_s += max(0.0, started - self._last_end)
        remaining = started + modelled_s / self.speedup - self._clock()
        if remaining > 0:
            self._sleep(remaining)
        else:
            self.overrun_s -= remaining
        self.steps += 1
        self.modelled_s += modelled_s
        self._last_end = self._clock()

    def idle(self, seconds: float) -> None:
        """Nothing can run yet (sequences waiting for KV held elsewhere)."""
        self._sleep(seconds)
        self._last_end = self._clock()

    def describe(self) -> str:
        """The books as the worker logs them (the goodput benchmark reads this line)."""
        r = self.report()
        return (
            f"pacing: {r.steps} steps, modelled {r.modelled_s:.3f} s, wall {r.wall_s:.3f} s, "
            f"speedup {self.speedup:g}, overrun {r.overrun_s:.3f} s, gaps {r.gap_s:.3f} s"
        )

    def report(self) -> PacingReport:
        wall = (
            0.0 if self._first is None or self._last_end is None else self._last_end - self._first
        )
        return PacingReport(self.steps, self.modelled_s, wall, self.overrun_s, self.gap_s)
