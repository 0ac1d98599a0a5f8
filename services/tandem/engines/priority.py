"""Which waiting work an engine takes first (pure), from ``SamplingParams.priority``.

Both rules take priorities listed in arrival order and return indices into that list.

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

With equal priorities both are plain arrival order, as before priorities existed.
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
