"""Timing an engine over a profile grid (``tandem.perf.profile``): the shell that runs it.

Every point starts from fresh sequences of random token ids, so no prompt finds another's
blocks in a prefix cache. A prefill is the whole prompt alone (``Engine.prefill``). A
decode point reserves its batch's KV as the decode side of a handoff does (``reserve``,
``commit``: nothing computed, the cache's bytes are whatever the pool held, which costs
the arithmetic the same) and times one step over all of it. One prefill and one decode
step run first, untimed, so the first point does not pay for cold caches and lazy
imports.
"""

from __future__ import annotations

import itertools
import os
import platform
import random
import time
from collections.abc import Callable
from pathlib import Path

from tandem.engines.base import Engine, SamplingParams
from tandem.perf.profile import Measurements, ProfileGrid

# The answer's first token for reserved sequences: any id of the vocabulary will do.
FIRST_TOKEN = 0


def measure_engine(
    engine: Engine,
    grid: ProfileGrid,
    *,
    seed: int = 0,
    clock: Callable[[], float] = time.perf_counter,
    progress: Callable[[str], None] = lambda _: None,
) -> Measurements:
    rng = random.Random(seed)
    ids = itertools.count()

    def prompt(tokens: int) -> list[int]:
        return [rng.randrange(engine.info.vocab_size) for _ in range(tokens)]

    def prefill(tokens: int) -> float:
        request = f"profile-{next(ids)}"
        text = prompt(tokens)
        started = clock()
        engine.prefill(request, text, SamplingParams(max_tokens=1))
        elapsed = clock() - started
        engine.release(request)
        return elapsed

    def decode(batch: int, context: int) -> float:
        requests = [f"profile-{next(ids)}" for _ in range(batch)]
        for request in requests:
            engine.reserve(request, prompt(context), FIRST_TOKEN)
            engine.commit(request)
        # Two tokens: the reserved first one and the step's; every sequence ends with it.
        step = dict.fromkeys(requests, SamplingParams(max_tokens=2))
        started = clock()
        engine.step(step)
        elapsed = clock() - started
        for request in requests:
            engine.release(request)
        return elapsed

    prefill(grid.prompts[0])
    decode(1, grid.prompts[0])
    prefills = {}
    for tokens in grid.prompts:
        prefills[tokens] = [prefill(tokens) for _ in range(grid.repeats)]
        progress(f"prefill {tokens} tokens: {_seconds(prefills[tokens])}")
    decodes = {}
    for batch in grid.batches:
        for context in grid.prompts:
            decodes[(batch, context)] = [decode(batch, context) for _ in range(grid.repeats)]
            progress(f"decode {batch} x {context} tokens: {_seconds(decodes[(batch, context)])}")
    return Measurements(prefills, decodes)


def _seconds(samples: list[float]) -> str:
    return ", ".join(f"{s:.3f}" for s in samples) + " s"


def describe_host() -> str:
    """The CPU and how many the process may use: what the table's figures hold for."""
    model = platform.machine()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    model = next(
        (line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), model
    )
    return f"{model}, {len(os.sched_getaffinity(0))} CPUs"
