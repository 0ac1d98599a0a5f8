"""The per-step token budget (pure): decode rows first, prefill chunks in arrival order,
deeper prefill tokens charged for their attention while decode rows wait."""

from __future__ import annotations

import math

import pytest

from tandem.engines.reference import ReferenceModelConfig
from tandem.engines.reference.step_plan import compute_attention_tokens, plan_prefill_chunks


@pytest.mark.parametrize(
    ("budget", "decodes", "pending", "chunks"),
    [
        (64, 0, [(0, 100)], [64]),  # no decodes: the whole budget
        (64, 8, [(0, 100)], [56]),  # decode rows come off it first
        (64, 8, [(0, 30), (0, 100)], [30, 24]),  # first come first served, then the next
        (64, 8, [(96, 100)], [4]),  # the last piece of a prompt
        (64, 62, [(0, 100)], [4]),  # at least one query group, however many decodes
        (64, 200, [(0, 100), (0, 5)], [4, 0]),
        (16, 3, [(1, 100)], [11]),  # 1 + 13 = 14 would split a group of 4: stop at 12
        (16, 3, [(1, 14)], [13]),  # the prompt's end may split a group
        (16, 0, [(2, 3)], [1]),
        (3, 0, [(1, 100)], [3]),  # a chunk smaller than the split is left as is
    ],
)
def test_plan_without_attention_cost(
    budget: int, decodes: int, pending: list[tuple[int, int]], chunks: list[int]
) -> None:
    assert plan_prefill_chunks(budget, decodes, pending, math.inf) == chunks


def test_deeper_tokens_take_more_of_the_budget_while_decodes_wait() -> None:
    """K = 100: a token at position p costs 1 + p / 100."""
    assert plan_prefill_chunks(64, 8, [(0, 10_000)], 100.0) == [44]  # 44 * 1.22 < 56
    assert plan_prefill_chunks(64, 8, [(1000, 10_000)], 100.0) == [4]  # 5 * 11 > 56
    assert plan_prefill_chunks(64, 0, [(1000, 10_000)], 100.0) == [64]  # nobody waits
    assert plan_prefill_chunks(64, 0, [(1000, 10_000)], 100.0, idle_budget=256) == [256]


def test_attention_tokens_from_the_architecture() -> None:
    """SmolLM2: 3,538,944 multiply-adds per token per layer, 2 x 9 x 64 per key, and
    numpy attention ~4x costlier per multiply-add: 768 tokens."""
    smollm2 = ReferenceModelConfig(
        hidden=576, num_heads=9, num_kv_heads=3, head_dim=64, intermediate=1536, sliding_window=0
    )
    assert compute_attention_tokens(smollm2) == pytest.approx(768.0)
