"""Reaction and flapping as the live replay's judge counts them, on logs small enough to
count by hand."""

from __future__ import annotations

import pytest

from tandem_dev.autoscale_sim.figures import (
    Tick,
    compute_reactions,
    compute_steady_flaps,
    count_direction_changes,
)
from tandem_dev.autoscale_sim.traces import Phase, RequestShape, Stream, Trace


@pytest.mark.parametrize(
    ("needed", "desired", "expected"),
    [
        ([1, 1, 4, 4, 4], [1, 1, 2, 4, 4], [2]),
        ([1, 4, 4, 1, 1], [1, 2, 3, 3, 1], [None]),  # need gone before it was met
        ([2, 2, 2], [2, 2, 2], []),
        ([1, 3, 3, 5, 5], [3, 3, 3, 3, 5], [1, 2]),  # already there: one decision
    ],
)
def test_reaction_counting(
    needed: list[int], desired: list[int], expected: list[int | None]
) -> None:
    ticks = [Tick(i * 5.0, d, n, d) for i, (n, d) in enumerate(zip(needed, desired, strict=True))]
    assert compute_reactions(ticks) == expected


@pytest.mark.parametrize(
    ("desired", "changes"),
    [([1, 2, 3, 3, 2], 1), ([2, 3, 2, 3, 2], 3), ([4, 4, 4], 0), ([1, 2, 2, 2, 3], 0)],
)
def test_direction_changes(desired: list[int], changes: int) -> None:
    assert count_direction_changes(desired) == changes


def test_flaps_are_counted_inside_constant_stretches_after_the_transient() -> None:
    mix = (RequestShape(1024, 128),)
    trace = Trace("t", "", 400, (Stream(mix, (Phase(200, 10), Phase(200, 20))),))
    # Flapping in the first 50 s of each stretch is the transient; later it counts.
    desired = [5 if i % 2 else 6 for i in range(10)] + [6] * 30 + [5, 6] * 20
    ticks = [Tick(5.0 * (i + 1), d, 6, 6) for i, d in enumerate(desired)]
    worst, measured = compute_steady_flaps(ticks, trace, settle_seconds=50)
    assert measured == 62  # decisions at 50..200 s and 250..400 s
    assert worst == 28  # [5, 6] alternating over 30 decisions in the second stretch
