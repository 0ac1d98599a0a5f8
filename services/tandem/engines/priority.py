"""Which waiting work an engine takes first (pure), from ``SamplingParams.priority``.

The first two rules take priorities listed in arrival order and return indices into that
list; the step rules size one step's prompt work.

* **Admission**: waiting requests start by priority, highest first, then by arrival, so
  a request the frontend ranked up (its tenant is below its fair share) does not wait
  behind a backlog it did not cause.
* **Prefill budget**: a step gives its prefill tokens only to the highest priority
  present, in arrival order. Handing the rest of the budget to lower-ranked prompts, as
  a throughput-first scheduler would, makes the step that carries the ranked-up prompt
  as long as a full budget (about 1.7x a lone 4k-token prompt's step on the simulated
  GB200 clock), and that step is its time to first token. Lower-ranked prefills lose
  only the steps in which a ranked-up prompt is prefilling, and a tenant stops being
  ranked up once it holds its share.

* **Step budget**: while a ranked-up sequence decodes, prompts ranked below it get at
  most :data:`OUTRANKED_PREFILL_SHARE` of a step's prefill tokens, and none while it
  writes its first :data:`FIRST_TOKENS` (:func:`holds_prompts`). Those first tokens are
  its time to first token as the client sees it (gpt-oss's answer starts with a
  three-token channel header, so the first text is the fourth token), and each is a step
  that would otherwise carry the other tenant's prefill chunks: a full 8k-token chunk
  makes it 4-6x as long as the decode rows alone, a quarter of one still twice. Paused
  for at most :data:`FIRST_TOKENS` - 1 steps per ranked-up request, then slowed, never
  stopped: a tenant is ranked up only while under its share, so the pauses are bounded
  by what the lower-ranked tenant is owed anyway.

With equal priorities all of these are what they were before priorities existed.
"""

from __future__ import annotations

from collections.abc import Sequence


def admission_order(priorities: Sequence[int]) -> list[int]:
    """Every index, highest priority first, arrival order within a priority."""
    return sorted(range(len(priorities)), key=lambda i: -priorities[i])


def prefill_order(priorities: Sequence[int]) -> list[int]:
    """The indices whose prefills this step advances: the highest priority's, in
    arrival order (none when nothing is prefilling)."""
    if not priorities:
        return []
    top = max(priorities)
    return [i for i, p in enumerate(priorities) if p == top]


# A quarter: on the simulated GB200 clock a 2k-token chunk adds about a decode step's own
# time to a step, where 8k adds four.
OUTRANKED_PREFILL_SHARE = 0.25
# The prefill step writes the first; gpt-oss's header is three (``<|channel|>final<|message|>``).
FIRST_TOKENS = 4


def holds_prompts(decode_rows: Sequence[tuple[int, int]], prefill_priority: int) -> bool:
    """Whether the step runs its decode rows alone: one of them outranks the prompts
    prefilling (``prefill_priority``: the highest prefilling, :func:`prefill_order`'s)
    and has generated fewer than :data:`FIRST_TOKENS`. ``decode_rows``: each row's
    (priority, tokens generated)."""
    return any(p > prefill_priority and g < FIRST_TOKENS for p, g in decode_rows)


def step_token_budget(budget: int, decode_priorities: Sequence[int], prefill_priority: int) -> int:
    """The step's tokens (one per decode row, the rest for prompts): ``budget``, unless a
    decode row outranks the prompts prefilling (``prefill_priority``), then the rows plus
    :data:`OUTRANKED_PREFILL_SHARE` of what is left for prompts (at least one token of
    it, when any is left)."""
    if not decode_priorities or max(decode_priorities) <= prefill_priority:
        return budget
    rows = len(decode_priorities)
    left = max(0, budget - rows)
    return rows + min(left, max(1, int(left * OUTRANKED_PREFILL_SHARE)))
