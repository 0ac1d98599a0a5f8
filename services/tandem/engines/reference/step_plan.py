"""What one engine step computes (pure): every decode row, then prefill chunks in arrival
order (among the highest priority's prompts: ``tandem.engines.priority``) under the
step's token budget, as vLLM v1's scheduler does, so a long prompt advances a chunk per
step instead of stalling every decode stream for its whole prefill.

While decode rows wait on the step, a prefill token is charged for its attention too:
at position p it costs ``1 + p / attention_tokens`` tokens of the budget
(``compute_attention_tokens``), so chunks shrink as a long prompt gets deeper and a
decode step's latency stays bounded. Without decode rows nobody waits: the step takes
chunks up to a larger, plain budget (fewer, bigger chunks prefill faster).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tandem.engines.reference.attention import QUERY_GROUP
from tandem.engines.reference.config import ReferenceModelConfig

# Attention in numpy costs about this many times more per multiply-add than the BLAS
# projections (small GEMMs, softmax passes, gathering K/V), measured on SmolLM2.
ATTENTION_COST_FACTOR = 4.0


def compute_attention_tokens(config: ReferenceModelConfig) -> float:
    """The context length at which a token's attention costs as much as its projections
    and MLP: multiply-adds per token per layer over those per key."""
    hidden, heads, dim = config.hidden, config.num_heads, config.head_dim
    projections = hidden * (heads + 2 * config.num_kv_heads) * dim + heads * dim * hidden
    mlp = (
        3
        * hidden
        * config.intermediate
        * max(1, config.experts_per_token if config.num_experts else 1)
    )
    per_key = 2 * heads * dim  # scores and the weighted sum of values
    return (projections + mlp) / (per_key * ATTENTION_COST_FACTOR)


def plan_prefill_chunks(
    budget: int,
    decode_rows: int,
    pending: Sequence[tuple[int, int]],
    attention_tokens: float = math.inf,
    idle_budget: int | None = None,
) -> list[int]:
    """Tokens to prefill this step for each pending prefill ``(computed, prompt_len)``,
    in order. Decode rows come off the ``budget`` first, and prefill tokens cost their
    attention too (module docstring); a step without decode rows has ``idle_budget``
    plain tokens (default: ``budget``). The first pending prefill always
    gets at least ``QUERY_GROUP`` tokens, so it is never starved. A chunk that stops
    short of its prompt's end stops at a multiple of ``QUERY_GROUP`` (attention computes
    queries in aligned groups: a split group would be computed twice)."""
    weighted = decode_rows > 0
    idle = budget if idle_budget is None else idle_budget
    share = float(max(budget - decode_rows, 0) if weighted else idle)
    chunks = []
    for index, (computed, prompt_len) in enumerate(pending):
        remaining = prompt_len - computed
        fits = _tokens_within(share, computed, attention_tokens) if weighted else int(share)
        chunk = min(remaining, max(fits, QUERY_GROUP if index == 0 else 0))
        end = computed + chunk
        if end < prompt_len and end % QUERY_GROUP and chunk > end % QUERY_GROUP:
            chunk -= end % QUERY_GROUP
        chunks.append(chunk)
        share -= _cost(chunk, computed, attention_tokens) if weighted else chunk
        share = max(share, 0.0)
    return chunks


def _cost(tokens: int, start: int, attention_tokens: float) -> float:
    """Budget taken by prefilling ``tokens`` from position ``start`` (mean position)."""
    return tokens * (1.0 + (start + tokens / 2.0) / attention_tokens)


def _tokens_within(share: float, start: int, attention_tokens: float) -> int:
    """The most tokens from ``start`` whose cost fits ``share``."""
    if share <= 0:
        return 0
    if math.isinf(attention_tokens):
        return int(share)
    # n^2 / (2K) + n (1 + start / K) <= share
    linear = 1.0 + start / attention_tokens
    n = (-linear + math.sqrt(linear * linear + 2.0 * share / attention_tokens)) * attention_tokens
    return max(0, math.floor(n + 1e-9))
