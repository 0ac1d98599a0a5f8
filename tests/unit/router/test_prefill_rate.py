"""The router's estimate of a prefill worker's rate, solved by hand."""

from __future__ import annotations

import pytest

from tandem.router.prefill_rate import update_prefill_rate


def test_the_first_sample_is_the_estimate() -> None:
    # 30,000 tokens ahead plus a 10,000-token prompt, replied after 2 s.
    assert update_prefill_rate(None, 40_000, 2.0) == 20_000.0


def test_later_samples_move_it_by_their_weight() -> None:
    # A 10,000 tokens/s sample moves a 20,000 estimate 0.3 of the way: 17,000.
    assert update_prefill_rate(20_000.0, 10_000, 1.0) == pytest.approx(17_000.0)


@pytest.mark.parametrize(("tokens", "seconds"), [(0, 1.0), (1000, 0.0), (1000, -1.0)])
def test_samples_without_tokens_or_time_change_nothing(tokens: int, seconds: float) -> None:
    assert update_prefill_rate(None, tokens, seconds) is None
    assert update_prefill_rate(5000.0, tokens, seconds) == 5000.0
