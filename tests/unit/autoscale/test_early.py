"""When the actuator decides before the interval is up (tandem.autoscale.early)."""

from __future__ import annotations

import pytest

from tandem.autoscale.early import may_decide_early, prompts_diverted_since


@pytest.mark.parametrize(
    ("current", "maximum", "since", "expected"),
    [
        pytest.param(0, 4, 0.6, True, id="at-zero-at-once"),
        pytest.param(1, 4, 2.4, False, id="too-soon-to-measure-a-rate"),
        pytest.param(1, 4, 2.5, True, id="half-an-interval-on"),
        pytest.param(4, 4, 4.0, False, id="at-the-maximum-nothing-to-decide"),
        pytest.param(0, 0, 4.0, False, id="a-pool-that-may-not-exist"),
    ],
)
def test_may_decide_early(current: int, maximum: int, since: float, expected: bool) -> None:
    assert may_decide_early(current, maximum, since, interval_seconds=5.0) is expected


@pytest.mark.parametrize(
    ("at_round", "latest", "expected"),
    [
        (3.0, 4.0, True),
        (3.0, 3.0, False),
        (3.0, 1.0, False),  # a frontend restarted: unknown, not a diversion
        (None, 4.0, False),  # the router did not export it at the last round
        (3.0, None, False),
    ],
)
def test_prompts_diverted_since(
    at_round: float | None, latest: float | None, expected: bool
) -> None:
    assert prompts_diverted_since(at_round, latest) is expected
