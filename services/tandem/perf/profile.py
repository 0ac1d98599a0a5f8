"""What ``tandem profile`` measures, and the table it makes of the measurements (pure).

The grid is what a CPU measures in a couple of minutes and what the engine holds:
prompts of 128 tokens, four times longer each, up to the longest asked (and the model's
context, and what the KV pool holds alone), are prefilled from an empty cache; decode
steps are timed at the same lengths as contexts, for batches 1, 2, 4, ... while that many
sequences of the longest context still fit the pool together. The table extends the
grid linearly beyond its edges (``tandem.perf.table``), which is how attention grows
with context and how a CPU's step grows with its batch.

Each point is measured ``repeats`` times and the table holds the median (to four
significant digits), so one step slowed by another process does not move it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tandem.perf.table import FORMAT, MeasuredWorker, render_worker

FIRST_PROMPT = 128
PROMPT_GROWTH = 4
LONGEST_PROMPT = 2048  # SmolLM2 prefills it in ~15 s on one core
MAX_BATCH = 16
REPEATS = 3

# Whether ``batch`` sequences of ``tokens`` tokens each (and one decode token more) fit
# the engine's KV pool at once.
Fits = Callable[[int, int], bool]


class ProfileError(ValueError):
    """Nothing can be measured (the pool holds no prompt); the message says why."""


@dataclass(frozen=True, slots=True)
class ProfileGrid:
    prompts: tuple[int, ...]  # prefill lengths, and the decode contexts
    batches: tuple[int, ...]
    repeats: int


@dataclass(frozen=True, slots=True)
class Measurements:
    """Seconds per repeat: ``prefill[tokens]`` and ``decode[(batch, context)]``."""

    prefill: Mapping[int, Sequence[float]]
    decode: Mapping[tuple[int, int], Sequence[float]]


def compute_profile_grid(
    max_context: int,
    fits: Fits,
    *,
    longest_prompt: int = LONGEST_PROMPT,
    max_batch: int = MAX_BATCH,
    repeats: int = REPEATS,
) -> ProfileGrid:
    # A prompt leaves room in the context for the token its decode step adds.
    longest = min(longest_prompt, max_context - 1)
    while longest >= 1 and not fits(1, longest):
        longest //= 2
    if longest < 1:
        raise ProfileError("the KV pool holds no prompt at all: give the engine more KV blocks")
    prompts = [FIRST_PROMPT]
    while prompts[-1] * PROMPT_GROWTH <= longest:
        prompts.append(prompts[-1] * PROMPT_GROWTH)
    # The longest point is the one asked for (or allowed), not the ladder's last rung.
    prompts = [p for p in prompts if p < longest] + [longest]
    batches = [1]
    while batches[-1] * 2 <= max_batch and fits(batches[-1] * 2, longest):
        batches.append(batches[-1] * 2)
    return ProfileGrid(tuple(prompts), tuple(batches), repeats)


def render_profile_table(
    grid: ProfileGrid,
    measured: Measurements,
    *,
    model: str,
    engine: str,
    accelerator: str,
    source: str,
    worker: MeasuredWorker,
) -> dict[str, Any]:
    """The ``tandem.perf-table/v1`` document: each point's median."""
    return {
        "format": FORMAT,
        "model": model,
        "engine": engine,
        "accelerator": accelerator,
        "tensor_parallel_size": 1,
        "source": source,
        "prefill": [[n, _median(measured.prefill[n])] for n in grid.prompts],
        "decode": {
            "batch": list(grid.batches),
            "context": list(grid.prompts),
            "seconds": [
                [_median(measured.decode[(b, c)]) for c in grid.prompts] for b in grid.batches
            ],
        },
        "worker": render_worker(worker),
    }


def _median(samples: Sequence[float]) -> float:
    # Four significant digits: repeats of a step differ in the second or third.
    return float(f"{statistics.median(samples):.4g}")
