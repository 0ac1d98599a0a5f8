"""Tensor parallelism in the reference engine across a Ray group (SmolLM2-135M), TP2
against TP1 in the same run.

TP1 runs in a process of its own; TP2 in a process started the way a LeaderWorkerSet
leader pod starts its worker: ``tandem.worker.ray_launch leader`` (the Ray head, token
authentication on) waits for the follower pod's node (``ray_launch follower``) and execs
the probe, which places its follower rank there through Ray (``tandem_dev.ray_group``:
both "pods" on loopback addresses of this machine). Each probe loads the model, then
measures on one BLAS thread per rank:

- ready: process start to the engine serving (model load; for TP2 also the follower's
  load, joining and the rank link), and group start to ready for TP2 (Ray's head and
  node starting, the follower joining);
- prefill of a 1,024-token prompt (tokens/s), and a decode step of 1 and of 8 sequences;
- for TP2, the share of each in the all-reduce: the leader's time in ``LeaderLink.reduce``
  (waiting for the follower's partial sums, and sending the total back), 2 per layer;
- for TP2, the KV conversions a handoff with a TP1 worker needs: gathering the prompt's
  KV into the whole model's layout (``ReferenceEngine.gather_kv``), and splitting KV
  that arrived whole across the ranks (``ReferenceEngine.commit``).

The two ranks share this 2-core machine with each other's Ray processes, so TP2's
ratios here say what the split costs and saves on CPU, not what NVLink-connected GPUs
see; each runs twice (TP1, TP2, TP2, TP1), and the table shows both runs. Bounded: a
fixed number of steps, about two minutes in all.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tandem.engines.base import SamplingParams
from tandem.engines.reference import ReferenceEngine
from tandem.engines.reference.loading import load_model
from tandem.engines.reference.tp.link import LeaderLink
from tandem.engines.reference.tp.ray_ranks import start_ranks
from tandem.models.catalog import SMOLLM2_SOURCE
from tandem_dev.ray_group import LocalRayGroup

PROMPT_TOKENS = 1024
DECODE_STEPS = 16
NEVER = 16  # <empty_output>: stands in for end-of-sequence, so streams never stop
STREAM = SamplingParams(max_tokens=1_000_000)
PROBE_TIMEOUT_S = 600
Result = dict[str, Any]
PROBE = [sys.executable, "-m", "tandem_dev.bench.tensor_parallel", "--probe"]


def _prompt(length: int, seed: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(100, 40_000, length)]


class _Reductions:
    """The leader link's reduce time over one measured span (0 for TP1)."""

    def __init__(self, link: LeaderLink | None) -> None:
        self._link = link
        self._start = 0.0

    def begin(self) -> None:
        self._start = self._link.reduce_seconds if self._link else 0.0

    def seconds(self) -> float:
        return (self._link.reduce_seconds - self._start) if self._link else 0.0


def probe(tensor_parallel: int, started: float) -> dict[str, Any]:
    """What the probe process prints (run as ``--probe``)."""
    options: dict[str, object] = {}
    if tensor_parallel > 1:
        options["tensor_parallel_size"] = tensor_parallel
    config, weights = load_model(options, SMOLLM2_SOURCE)
    ranks = start_ranks(options, SMOLLM2_SOURCE, tensor_parallel) if tensor_parallel > 1 else None
    # Only the leader samples: streams that never stop need its end-of-sequence alone.
    engine = ReferenceEngine(dataclasses.replace(config, eos_token_id=NEVER), weights, ranks)
    ready_s = time.time() - started
    reductions = _Reductions(ranks.link if ranks else None)

    reductions.begin()
    began = time.perf_counter()
    prefilled = engine.prefill("p", _prompt(PROMPT_TOKENS, 1), STREAM)
    prefill_s = time.perf_counter() - began
    prefill_reduce_s = reductions.seconds()
    # What a handoff to a TP1 worker costs before the transport reads: the follower's
    # heads gathered and interleaved into the whole layout (nothing for TP1, whose pool
    # is that layout).
    began = time.perf_counter()
    engine.gather_kv("p")
    gather_s = time.perf_counter() - began
    engine.release("p")
    # The other way: KV a TP1 worker prefilled, arrived whole, split across the ranks on
    # commit (the bytes do not matter to the time).
    engine.reserve("s", _prompt(PROMPT_TOKENS, 2), prefilled.first_token)
    began = time.perf_counter()
    engine.commit("s")
    split_s = time.perf_counter() - began
    engine.release("s")

    decode: dict[str, dict[str, float]] = {}
    for batch in (1, 8):
        ids = [f"d{batch}-{i}" for i in range(batch)]
        for i, rid in enumerate(ids):
            engine.prefill(rid, _prompt(64, 10 + i), STREAM)
        steps, reduce_s = [], 0.0
        for _ in range(DECODE_STEPS):
            reductions.begin()
            began = time.perf_counter()
            engine.step(dict.fromkeys(ids, STREAM))
            steps.append(time.perf_counter() - began)
            reduce_s += reductions.seconds()
        for rid in ids:
            engine.release(rid)
        decode[str(batch)] = {
            "step_ms": statistics.median(steps) * 1000,
            "reduce_share": reduce_s / sum(steps),
        }
    if ranks is not None:
        ranks.close()
    return {
        "ready_s": ready_s,
        "prefill_tokens_per_s": PROMPT_TOKENS / prefill_s,
        "prefill_reduce_share": prefill_reduce_s / prefill_s,
        "prefill_s": prefill_s,
        "handoff_kv_bytes": prefilled.kv.nbytes,
        "gather_s": gather_s,
        "split_s": split_s,
        "decode": decode,
        "reductions_per_step": 2 * config.num_layers,
    }


def _run_probe(argv: list[str], env: dict[str, str], log: Path) -> Result:
    with log.open("wb") as err:
        done = subprocess.run(
            argv, env=env, stdout=subprocess.PIPE, stderr=err, timeout=PROBE_TIMEOUT_S, check=False
        )
    if done.returncode != 0:
        raise RuntimeError(f"probe failed ({done.returncode}):\n{log.read_text()[-3000:]}")
    result: Result = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return result


def _measure_tp1(work: Path, run: int) -> Result:
    argv = [*PROBE, "--tp=1", f"--started={time.time()}"]
    return _run_probe(argv, dict(os.environ), work / f"tp1-{run}.log")


def _measure_tp2(work: Path, run: int) -> Result:
    group = LocalRayGroup()
    try:
        started = time.time()
        group.start_follower(work / f"follower-{run}.log")
        argv = [*group.leader_launcher(), *PROBE, "--tp=2", f"--started={started}"]
        return _run_probe(argv, group.env, work / f"tp2-{run}.log")
    finally:
        group.stop()


def measure(work: Path) -> tuple[list[Result], list[Result]]:
    """Two runs of each, in the order TP1, TP2, TP2, TP1, so that drifting machine load
    hits both alike."""
    first, second = _measure_tp1(work, 1), _measure_tp2(work, 1)
    third, fourth = _measure_tp2(work, 2), _measure_tp1(work, 2)
    return [first, fourth], [second, third]


def render(one: list[Result], two: list[Result]) -> str:
    def row(what: str, pick: Any, unit: str, better_low: bool) -> str:
        a, b = [pick(r) for r in one], [pick(r) for r in two]
        mean_a, mean_b = statistics.mean(a), statistics.mean(b)
        ratio = (mean_a / mean_b) if better_low else (mean_b / mean_a)
        runs = [", ".join(f"{v:,.1f}" for v in values) for values in (a, b)]
        return f"| {what} | {runs[0]} {unit} | {runs[1]} {unit} | {ratio:.2f}x |"

    def share(pick: Any) -> str:
        return " and ".join(f"{pick(r):.0%}" for r in two)

    lines = [
        "| SmolLM2-135M, one BLAS thread per rank | TP1 (2 runs) | TP2, 2 Ray nodes (2 runs) "
        "| TP2 speed-up (means) |",
        "|---|---|---|---|",
        row(f"prefill, {PROMPT_TOKENS}-token prompt", lambda r: r["prefill_tokens_per_s"],
            "tokens/s", better_low=False),
    ]  # fmt: skip
    for batch in ("1", "8"):
        lines.append(
            row(f"decode step, batch {batch}", lambda r, b=batch: r["decode"][b]["step_ms"],
                "ms", better_low=True)
        )  # fmt: skip
    lines.append(
        row("start to ready (TP2: the whole group)", lambda r: r["ready_s"], "s", better_low=True)
    )
    lines += [
        "",
        f"- TP2 time in the all-reduce ({two[0]['reductions_per_step']} per step, over TCP "
        f"between the ranks, waiting for the other rank's partial sums included): "
        f"{share(lambda r: r['prefill_reduce_share'])} of the prefill, "
        f"{share(lambda r: r['decode']['1']['reduce_share'])} of a batch-1 decode step, "
        f"{share(lambda r: r['decode']['8']['reduce_share'])} of a batch-8 one.",
        "- TP2's ready time counts Ray's head and node starting, the follower joining, both "
        "ranks loading the model and the rank link; TP1's, its process loading the model.",
        f"- TP2 -> TP1 KV conversion: before a TP1 worker reads the {PROMPT_TOKENS}-token "
        f"prompt's KV ({two[0]['handoff_kv_bytes'] / 2**20:.1f} MiB, the same bytes a TP1 "
        "prefill worker hands over), the leader gathers the follower's heads over the rank "
        "link and interleaves them into the whole layout: "
        f"{' and '.join(format(r['gather_s'] * 1000, '.0f') + ' ms' for r in two)}, "
        f"{share(lambda r: r['gather_s'] / r['prefill_s'])} of the prompt's prefill. "
        "TP1 -> TP2, the same KV arrived whole is split across the ranks on commit (the "
        "leader's heads into its pool, the follower's over the link): "
        f"{' and '.join(format(r['split_s'] * 1000, '.0f') + ' ms' for r in two)}.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tp", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--started", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        print(json.dumps(probe(args.tp, args.started or time.time())), flush=True)
        return
    with tempfile.TemporaryDirectory(prefix="tp-bench") as work:
        print(render(*measure(Path(work))))


if __name__ == "__main__":
    main()
