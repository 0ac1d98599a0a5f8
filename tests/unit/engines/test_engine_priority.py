"""Which waiting work an engine takes first (``tandem.engines.priority``)."""

from __future__ import annotations

from tandem.engines.priority import (
    FIRST_TOKENS,
    admission_order,
    holds_prompts,
    prefill_order,
    step_token_budget,
)


def test_admission_is_by_priority_then_arrival() -> None:
    assert admission_order([0, 1, 0, 2, 1]) == [3, 1, 4, 0, 2]


def test_equal_priorities_keep_arrival_order() -> None:
    assert admission_order([0, 0, 0]) == [0, 1, 2]
    assert prefill_order([0, 0, 0]) == [0, 1, 2]


def test_a_step_prefills_only_the_highest_priority_present() -> None:
    assert prefill_order([0, 1, 0, 1]) == [1, 3]
    assert prefill_order([]) == []


def test_an_outranking_decode_row_leaves_lower_prompts_a_quarter_of_the_step() -> None:
    assert step_token_budget(8192, [0, 0, 1], 0) == 3 + (8192 - 3) // 4
    # Nothing outranks: the whole budget, as before priorities.
    assert step_token_budget(8192, [0, 1], 1) == 8192
    assert step_token_budget(8192, [], 0) == 8192
    # Never starved: one prompt token at least while the rows leave any.
    assert step_token_budget(5, [1, 1, 1], 0) == 4
    assert step_token_budget(3, [1, 1, 1], 0) == 3


def test_lower_prompts_wait_while_an_outranking_row_writes_its_first_tokens() -> None:
    # Its tokens 2 to FIRST_TOKENS (the prefill wrote the first): no prompt runs.
    for generated in range(1, FIRST_TOKENS):
        assert holds_prompts([(0, 9), (1, generated)], 0)
    assert not holds_prompts([(0, 9), (1, FIRST_TOKENS)], 0)
    # Any outranking row still in its first tokens holds them; equals never do.
    assert holds_prompts([(1, 30), (1, 2)], 0)
    assert not holds_prompts([(1, 1)], 1)
    assert not holds_prompts([], 0)
