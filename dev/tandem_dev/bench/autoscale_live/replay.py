"""One trace replayed in real time against ``tandem up`` with the builtin autoscaler on
(the I/O shell): every arrival streamed by the official ``openai`` client at its time,
the workers that exist sampled from the supervisor's state file, and every autoscaler
round read back from ``autoscaling.json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai

from tandem.runtime.scaling_record import TickRecord, read_record
from tandem.runtime.state import cluster_dir, read_state
from tandem_dev.autoscale_sim.traces import Arrival
from tandem_dev.bench.chat_workload import sum_samples
from tandem_dev.bench.goodput.stack import MODEL, Pacing, read_pacing, run_cluster

SAMPLE_S = 0.5
REQUEST_DEADLINE_S = 60.0
# Six-digit request numbers: o200k splits digits in threes, so every head tokenizes to
# the same length and one checked template serves all prompts of a length.
FIRST_INDEX = 100_000


@dataclass(frozen=True, slots=True)
class Served:
    """One request as its client saw it, in seconds since the trace began."""

    arrival: float
    sent: float
    first_token: float | None
    end: float
    output_tokens: int
    prompt_tokens: int
    error: str = ""


@dataclass(frozen=True, slots=True)
class WorkerSample:
    at: float
    prefill: int  # worker processes, starting and draining ones included
    decode: int


@dataclass(slots=True)
class LiveRun:
    served: list[Served] = field(default_factory=list)
    samples: list[WorkerSample] = field(default_factory=list)
    ticks: dict[int, TickRecord] = field(default_factory=dict)  # by autoscaler round
    started_wall: float = 0.0  # time.time() when the trace began (ticks' clock)
    pacing: dict[str, Pacing] = field(default_factory=dict)
    # The router's prefill decisions by reason ("long_prompt", "prefill_saturated", ...).
    decisions: dict[str, float] = field(default_factory=dict)
    # Long prompts that waited for a starting prefill worker, by where they then went.
    start_waits: dict[str, float] = field(default_factory=dict)


async def _stream(
    client: openai.AsyncOpenAI, prompt: str, output_tokens: int, arrival: float, t0: float
) -> Served:
    sent = time.monotonic() - t0
    first: float | None = None
    last = sent
    usage: Any = None
    try:
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=output_tokens,
            stream=True,
            stream_options={"include_usage": True},
        )
        async for chunk in stream:
            now = time.monotonic() - t0
            if chunk.usage is not None:
                usage = chunk.usage
            if chunk.choices and chunk.choices[0].delta.content:
                first = now if first is None else first
                last = now
    except (openai.APIError, TimeoutError) as exc:
        return Served(arrival, sent, first, time.monotonic() - t0, 0, 0, type(exc).__name__)
    if usage is None:
        return Served(arrival, sent, first, last, 0, 0, "no usage")
    return Served(arrival, sent, first, last, usage.completion_tokens, usage.prompt_tokens)


def _count_workers(state_dir: Path) -> tuple[int, int] | None:
    state = read_state(state_dir)
    if state is None:
        return None
    pools = [w.component for w in state.workers]
    return pools.count("prefill"), pools.count("decode")


async def _watch(state_dir: Path, run: LiveRun, t0: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        counts = await asyncio.to_thread(_count_workers, state_dir)
        if counts is not None:
            run.samples.append(WorkerSample(time.monotonic() - t0, *counts))
        record = await asyncio.to_thread(read_record, state_dir)
        if record is not None:
            for tick in record.recent:
                run.ticks.setdefault(tick.tick, tick)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SAMPLE_S)


async def _replay(
    endpoint: str,
    state_dir: Path,
    arrivals: Sequence[Arrival],
    prompts: Sequence[str],
    duration_s: float,
) -> LiveRun:
    run = LiveRun()
    stop = asyncio.Event()
    client = openai.AsyncOpenAI(
        base_url=endpoint, api_key="unused", max_retries=0, timeout=REQUEST_DEADLINE_S
    )
    t0 = time.monotonic()
    run.started_wall = time.time()
    watcher = asyncio.create_task(_watch(state_dir, run, t0, stop))
    tasks = []
    for arrival, prompt in zip(arrivals, prompts, strict=True):
        delay = arrival.at - (time.monotonic() - t0)
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(
            asyncio.create_task(_stream(client, prompt, arrival.output_tokens, arrival.at, t0))
        )
    run.served = list(await asyncio.gather(*tasks))
    remaining = duration_s - (time.monotonic() - t0)
    if remaining > 0:  # the trace's quiet tail still costs what the pools hold
        await asyncio.sleep(remaining)
    stop.set()
    await watcher
    await client.close()
    return run


def replay(
    home: Path,
    name: str,
    document: dict[str, Any],
    arrivals: Sequence[Arrival],
    prompts: Sequence[str],
    duration_s: float,
) -> LiveRun:
    """Start the cluster, replay ``arrivals`` (``prompts[i]`` for the i-th), stop it."""
    with run_cluster(home, name, document) as endpoint:
        run = asyncio.run(_replay(endpoint, cluster_dir(name, home), arrivals, prompts, duration_s))
        run.pacing = read_pacing(home, name)
        metrics = httpx.get(endpoint.removesuffix("/v1") + "/metrics", timeout=10).text
        run.decisions = sum_samples(metrics, "tandem_router_prefill_decisions_total", "reason")
        run.start_waits = sum_samples(
            metrics, "tandem_router_prefill_start_wait_seconds_count", "path"
        )
    return run
