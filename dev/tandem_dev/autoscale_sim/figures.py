"""Reaction and flapping, computed from a run's per-interval log of decisions (the live
replay's judge, ``tandem_dev.bench.autoscale_live.judge``, builds the log).

- **reaction**: for each rise in needed replicas, decisions from the load change until
  ``desired`` first reaches the new need (1 = the first decision after the change).
- **direction changes per 30 intervals of steady load**: the most reversals of
  ``desired`` (up then down, or down then up) in any 30 consecutive decisions that lie
  in one constant-load stretch, after the stretch's settling time (the transient of the
  change itself is not flapping).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from tandem_dev.autoscale_sim.traces import Trace

STEADY_WINDOW_INTERVALS = 30


@dataclass(frozen=True, slots=True)
class Tick:
    """One decision of a run: when, what was desired, what the oracle needed, and how
    many workers were ready."""

    at: float
    desired: int
    needed: int
    ready: int


def compute_reactions(ticks: Sequence[Tick]) -> list[int | None]:
    """Decisions from each rise in need to ``desired >= need``; None if never reached
    before the need changed again."""
    reactions: list[int | None] = []
    for i, tick in enumerate(ticks):
        before = ticks[i - 1].needed if i > 0 else tick.needed
        if tick.needed <= before:
            continue
        reached: int | None = None
        for j in range(i, len(ticks)):
            if ticks[j].needed != tick.needed:
                break
            if ticks[j].desired >= tick.needed:
                reached = j - i + 1
                break
        reactions.append(reached)
    return reactions


def count_direction_changes(desired: Sequence[int]) -> int:
    changes, last = 0, 0
    for before, after in itertools.pairwise(desired):
        step = (after > before) - (after < before)
        if step and last and step != last:
            changes += 1
        if step:
            last = step
    return changes


def compute_steady_flaps(
    ticks: Sequence[Tick], trace: Trace, settle_seconds: float
) -> tuple[int | None, int]:
    """(most direction changes in any 30 steady decisions or None if no stretch is long
    enough, steady decisions measured)."""
    runs: list[list[int]] = []
    current_start: float | None = None
    for tick in ticks:
        start = trace.segment_start(tick.at - 1e-9)
        if tick.at - start < settle_seconds:
            continue
        if start != current_start:
            runs.append([])
            current_start = start
        runs[-1].append(tick.desired)
    worst: int | None = None
    measured = 0
    for run in runs:
        if len(run) < STEADY_WINDOW_INTERVALS:
            continue
        measured += len(run)
        for i in range(len(run) - STEADY_WINDOW_INTERVALS + 1):
            window = run[i : i + STEADY_WINDOW_INTERVALS]
            worst = max(worst or 0, count_direction_changes(window))
    return worst, measured


def compute_percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]
