"""What one simulated step runs (pure): which waiting sequences get KV, and how many
prompt tokens each prefill advances.

Admission is TensorRT-LLM's default capacity policy, "guaranteed no evict", plus the
request priority that TensorRT-LLM's LLM API lacks (``tandem.engines.trtllm.engine``): a
sequence starts only once the KV for its prompt *and* its whole answer is free, in
admission order -- priority, then arrival (``tandem.engines.priority``); a large request
at the head waits, and those behind it wait too -- and at most ``max_batch_size``
sequences hold KV at once. Sequences that cannot start wait in the
engine's queue, so queueing and KV pressure emerge from the load.

Chunked prefill: every decode row takes one token of the step's ``max_num_tokens``; the
rest goes to prefill chunks, in arrival order among the prompts of the highest priority
prefilling (``tandem.engines.priority.prefill_order`` picks them), a quarter of it while
a decode row outranks them (``step_token_budget``), none while such a row writes its
first tokens (``holds_prompts``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Waiting:
    ready: bool  # its KV need is known (an adopted sequence learns max_tokens at its first step)
    blocks: int


def choose_admissions(
    waiting: Sequence[Waiting], free_blocks: int, free_batch_slots: int
) -> list[int]:
    """Indices of ``waiting`` (admission order) that start now."""
    admitted = []
    for index, entry in enumerate(waiting):
        if not entry.ready:
            continue
        if entry.blocks > free_blocks or free_batch_slots <= 0:
            break
        admitted.append(index)
        free_blocks -= entry.blocks
        free_batch_slots -= 1
    return admitted


def plan_chunks(max_num_tokens: int, decode_rows: int, remaining: Sequence[int]) -> list[int]:
    """Prompt tokens each prefilling sequence (``remaining`` tokens each, in the order
    the budget goes to them) computes this step."""
    share = max(0, max_num_tokens - decode_rows)
    chunks = []
    for left in remaining:
        n = min(left, share)
        chunks.append(n)
        share -= n
    return chunks
