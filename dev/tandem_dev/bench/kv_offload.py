"""KV offload tiers on long multi-turn chats: with offload and without, KV-event routing
and round-robin, on SmolLM2 through the real stack (issue 37); with ``--hardware gb200``
the same at 32k-token prompts on simulated gpt-oss-120b workers.

The load (``chat_workload.build_tool_chat_workload``): an agent's desk -- a ~1,000-token
system prompt shared by every chat, and chats whose every user turn carries a ~300-token
diagnostics tool output that the conversation keeps, so each turn's prompt is the whole
history plus one more tool output. Answers are greedy and short (decoding is not what
offload changes), and go back into the history. Every chat's first turn, then every
chat's second, and so on: each chat's history waits while the others take their turn.

The tiers are sized so the chats cannot stay on the device: each worker's device KV pool
holds the longest prompt with a little room (``num_kv_blocks``), the host tier twice
that, the disk tier (NIXL's POSIX backend) all the chats' KV; the chats' working set --
the system prompt once plus every chat's history -- is at least 4x the device pools of
a whole fleet. Sizes come from the chats rendered through SmolLM2's own tokenizer and
chat template (placeholder answers of the answers' length), before anything starts.

Rows, each on its own fleet as ``tandem up`` plans it (``plan_local``): 4 workers of
the decode pool that prefill their own prompts (``--workers``), no prefill pool -- so
where the router sends a turn decides which caches and tiers it finds (with a prefill
pool, round-robin's prefills all go to the first prefill worker when the pool is idle,
whose tiers would hold every chat: the kv-routing section) -- and the real frontend:

- KV-event routing, offload on;
- KV-event routing, offload off (evicted KV is recomputed);
- round-robin, offload on. The number of chats shares no factor with the fleet's size:
  otherwise round-robin would send every turn of a chat to the same worker (15 chats on 3
  workers) and meet KV routing's best case. With 4 workers it sends each of a chat's 4
  turns to another worker; with 2 it alternates, so every other turn finds its chat's
  history -- the smallest fleet, the kindest to round-robin (the reading says which).

Unless ``--chats`` says otherwise, the chats are as many as the working-set floor needs
for the fleet (at least 15): a bigger fleet has more device pool to outgrow.

The rows run side by side with the same chats in the same order, their requests
interleaved one at a time (a different row first at each step), so whatever load the
shared machine carries hits every row alike, and each request finds its fleet idle: what
decides its TTFT is what its worker must compute. Prompt tokens computed, served from
the device cache and onboarded from the tiers are the workers' own counters. Greedy
answers must come out the same in every row; the section says whether they did.
Bounded: rows x chats x turns requests (+1 warm-up per row), a deadline for the run.

On a simulated GPU (``--hardware``) nothing is computed or stored: a prompt's prefill
takes what the step clock says, a block onboarded what its bytes take over the profile's
host link or disk (``tandem.perf.hardware``), in real time. The chats are grown so the
longest prompt is ~32k tokens; the disk tier is modelled, so it needs no NIXL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

from tandem.api.v1alpha1 import InferenceCluster, RoutingPolicy
from tandem.api.validate import parse_inference_cluster
from tandem.devcluster.ports import allocate_ports
from tandem.engines.reference.config import ReferenceModelConfig
from tandem.engines.reference.gguf_weights import open_gguf, read_architecture
from tandem.engines.simulated.config import SimulatedConfig
from tandem.kv import nixl_available
from tandem.kv.events import Tier
from tandem.models.catalog import SMOLLM2_SOURCE
from tandem.models.source import resolve_local_model_file
from tandem.perf.model import compute_sequence_blocks
from tandem.router.onboarding import DEFAULT_TIER_WEIGHTS, measured_tier_weights
from tandem.tokenization.gguf_tokenizer import load_gguf_tokenizer
from tandem.tokenization.harmony import load_harmony_tokenizer
from tandem.tokenization.protocol import ChatMessage, Tokenizer
from tandem_dev.bench.chat_fleet import SERVED, WorkerCounts, ask, write_plan
from tandem_dev.bench.chat_workload import (
    ChatWorkload,
    build_tool_chat_workload,
    interleave_turns,
    summarize_ttft,
)
from tandem_dev.bench.local_fleet import FRONTEND, run_frontends, run_workers

TARGET_SPEEDUP = 2.0  # issue 37: TTFT p50 with offload vs without, KV routing vs round-robin
WORKING_SET_FLOOR = 4.0  # issue 37: the working set against the device pool
CHATS = 15  # the fewest; more where the fleet's pools need them (see the docstring)
TURNS = 4
RULES = 32  # ~1,000 system-prompt tokens
LOG_LINES = 12  # ~300 tokens of tool output per turn
# On a simulated GPU: ~10,000 system-prompt tokens and ~5,700 of tool output a turn, so
# the 4th turn's prompt is ~32k tokens (o200k_harmony, measured with the chats rendered).
GPU_RULES = 320
GPU_LOG_LINES = 330
HARDWARE = ("gb200", "b200")
MAX_TOKENS = 8
WORKERS = 4
HOST_POOLS = 2  # the host tier holds this many device pools: the disk tier the rest
GAP_S = 1.5  # between a fleet's requests: longer than its router's health round (1 s)
STARTUP_S = 300.0
RUN_BUDGET_S = 2400.0


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    routing: RoutingPolicy
    offload: bool


ROWS = (
    Row("KV routing, offload", RoutingPolicy.KV_AWARE, True),
    Row("KV routing, no offload", RoutingPolicy.KV_AWARE, False),
    Row("round-robin, offload", RoutingPolicy.ROUND_ROBIN, True),
)


@dataclass(frozen=True, slots=True)
class Sizing:
    """A worker's tiers, in tokens, for chats of ``working_set`` tokens of KV whose
    longest prompt (with its answer) is ``longest_prompt``, on ``fleet`` workers."""

    block: int
    pool_tokens: int
    host_tokens: int
    disk_tokens: int
    longest_prompt: int
    working_set: int
    fleet: int

    @property
    def working_set_ratio(self) -> float:
        """The working set against the device pools of the whole fleet."""
        return self.working_set / (self.pool_tokens * self.fleet)


def size_tiers(
    longest_prompt: int, working_set: int, block: int, host_pools: int, fleet: int
) -> Sizing:
    """The device pool holds the longest prompt and its answer, plus two blocks of slack
    (the model's answers may take more tokens than the placeholders estimated); the host
    tier ``host_pools`` pools; the disk tier the whole working set, which any worker may
    end up holding under round-robin."""
    pool = _round_up(longest_prompt, block) + 2 * block
    return Sizing(
        block,
        pool,
        host_pools * pool,
        _round_up(working_set, block),
        longest_prompt,
        working_set,
        fleet,
    )


def choose_chats(fleet: int, ratio_of: Callable[[int], float]) -> int:
    """The fewest chats, at least ``CHATS``, whose working set is ``WORKING_SET_FLOOR``
    times the fleet's device pools by ``ratio_of(chats)``, and that share no factor with
    the fleet's size (so that round-robin moves a chat from worker to worker)."""
    chats = CHATS
    while math.gcd(chats, fleet) != 1 or ratio_of(chats) < WORKING_SET_FLOOR:
        chats += 1
    return chats


def round_robin_return(chats: int, fleet: int) -> int:
    """After how many turns round-robin sends a chat back to the same worker, when
    every chat takes its turn in order (``interleave_turns``)."""
    return fleet // math.gcd(chats, fleet)


def _round_up(tokens: int, block: int) -> int:
    return -(-tokens // block) * block


def estimate_tokens(workload: ChatWorkload, tokenizer: Tokenizer, answer: str) -> tuple[int, int]:
    """(longest prompt, working set) in tokens: each chat rendered whole through the
    chat template, ``answer`` standing for every answer; the working set counts the
    shared system prompt once."""
    system = [ChatMessage("system", workload.system)]
    shared = len(tokenizer.apply_chat_template(system, add_generation_prompt=False))
    whole = []
    for chat in workload.conversations:
        messages = list(system)
        for message in chat:
            messages += [ChatMessage("user", message), ChatMessage("assistant", answer)]
        whole.append(len(tokenizer.apply_chat_template(messages, add_generation_prompt=False)))
    return max(whole), shared + sum(n - shared for n in whole)


@dataclass(frozen=True, slots=True)
class Workers:
    """What every row's workers run: their cluster's model, engine and accelerator, and
    what sizing their tiers needs."""

    description: str  # in the section's text
    tokenizer: Tokenizer  # the model's, to size the tiers from the rendered chats
    block: int  # tokens per KV block
    token_bytes: int  # a token's KV in every layer, on one worker
    model: dict[str, str]  # spec.model, less its token limits
    engine: str  # spec.engine.kind
    accelerator: str | None  # spec.accelerator.profile
    # spec.engine.options for a device pool of that many tokens
    pool_options: Callable[[int], dict[str, object]]
    disk_is_modelled: bool  # no bytes are stored: the disk tier needs no NIXL


def smollm2_workers() -> Workers:
    path = resolve_local_model_file(SMOLLM2_SOURCE)
    config = ReferenceModelConfig.from_options({}, read_architecture(open_gguf(path), path))
    return reference_workers(config, load_gguf_tokenizer(path))


def reference_workers(config: ReferenceModelConfig, tokenizer: Tokenizer) -> Workers:
    """SmolLM2 in the reference engine, shaped as ``config``."""
    layers, block = config.num_layers, config.kv_block_size
    return Workers(
        "SmolLM2-135M-Instruct, reference engine",
        tokenizer,
        block,
        config.kv_token_bytes * layers,
        {"name": "HuggingFaceTB/SmolLM2-135M-Instruct", "source": SMOLLM2_SOURCE},
        "reference",
        None,
        # A pool block is one layer's KV of ``block`` tokens.
        lambda pool: {"num_kv_blocks": pool // block * layers},
        disk_is_modelled=False,
    )


def simulated_workers(profile: str) -> Workers:
    """TP1 gpt-oss-120b workers (fp8 KV) on ``profile``, their pool sized by the share of
    free GPU memory that holds it, every prompt's full blocks kept for reuse."""
    options: dict[str, object] = {"kv_cache_dtype": "fp8", "prefix_cache": True}
    config = SimulatedConfig.from_options({**options, "accelerator": profile})
    whole = config.compute_capacity(free_gpu_memory_fraction=1.0)

    def pool_options(pool: int) -> dict[str, object]:
        # A sequence of ``pool`` tokens fits (its sliding-window layers' blocks too);
        # rounded up, so the pool holds at least that.
        blocks = compute_sequence_blocks(config.perf, whole, pool)
        fraction = math.ceil(blocks / whole.blocks * 1e6) / 1e6
        return {**options, "free_gpu_memory_fraction": fraction}

    return Workers(
        f"gpt-oss-120b on simulated {profile.upper()} TP1 workers, fp8 KV, real time",
        load_harmony_tokenizer(),
        whole.tokens_per_block,
        whole.block_bytes // whole.tokens_per_block,
        {"name": "openai/gpt-oss-120b"},
        "simulated",
        profile,
        pool_options,
        disk_is_modelled=True,
    )


def has_disk_tier(workers: Workers) -> bool:
    return workers.disk_is_modelled or nixl_available()


def cluster_spec(row: Row, sizing: Sizing, workers: Workers, disk_dir: Path) -> InferenceCluster:
    """A row's cluster, as a user would write it for ``tandem up``."""
    token_bytes = workers.token_bytes
    # Without NIXL there is no disk tier: the host tier takes its share.
    disk = sizing.disk_tokens if has_disk_tier(workers) else 0
    host = sizing.host_tokens + (sizing.disk_tokens - disk)
    offload = {
        "enabled": True,
        "hostBytes": host * token_bytes,
        "diskBytes": disk * token_bytes,
        "diskPath": str(disk_dir) if disk else "",
    }
    doc = {
        "apiVersion": "tandem.dev/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": "kv-offload-bench"},
        "spec": {
            "model": {
                **workers.model,
                "servedName": SERVED,
                "maxInputTokens": sizing.pool_tokens,
                "maxOutputTokens": MAX_TOKENS,
            },
            "engine": {
                "kind": workers.engine,
                "options": workers.pool_options(sizing.pool_tokens),
            },
            **({"accelerator": {"profile": workers.accelerator}} if workers.accelerator else {}),
            "frontend": {"routingPolicy": row.routing.value},
            "prefill": {"replicas": 0},
            "decode": {
                "replicas": sizing.fleet,
                "kvCache": {"offload": offload if row.offload else {"enabled": False}},
            },
        },
    }
    return parse_inference_cluster(doc, "kv-offload benchmark")


@dataclass(frozen=True, slots=True)
class RowResult:
    row: Row
    samples: list[tuple[int, float]]  # (turn, TTFT in s) of every measured request
    prompt_tokens: int  # as the frontend reported them (usage)
    longest_prompt: int  # likewise
    counts: WorkerCounts
    answers: list[list[str]]  # each chat's answers, in turn order

    @property
    def ttft(self) -> list[float]:
        return [t for _, t in self.samples]

    def ttft_of_turn(self, turn: int) -> list[float]:
        return [t for n, t in self.samples if n == turn]

    def tokens(self, source: str) -> float:
        return self.counts.by_source.get(source, 0.0)


@dataclass(slots=True)
class _Live:
    """One row while the benchmark runs: its frontend, fleet, chats and measures."""

    row: Row
    workload: ChatWorkload
    client: AsyncOpenAI
    workers: list[tuple[str, str]]  # (role, metrics URL)
    histories: list[list[ChatCompletionMessageParam]]
    answers: list[list[str]]
    samples: list[tuple[int, float]] = field(default_factory=list)
    prompt_tokens: int = 0
    longest_prompt: int = 0
    idle_since: float = 0.0

    async def warm(self) -> None:
        """Puts the system prompt in one worker's cache, as a busy service holds it."""
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": self.workload.system},
            {"role": "user", "content": "Hello."},
        ]
        await ask(self.client, messages, 2)
        self.idle_since = time.monotonic()

    async def take_turn(self, chat: int, turn: int) -> None:
        # The router's view of its workers' load lags up to a health round: let the
        # fleet's last request leave it before this one is routed.
        await asyncio.sleep(max(0.0, self.idle_since + GAP_S - time.monotonic()))
        messages = self.histories[chat]
        messages.append({"role": "user", "content": self.workload.conversations[chat][turn]})
        ttft, answer, tokens = await ask(self.client, messages, MAX_TOKENS)
        self.idle_since = time.monotonic()
        messages.append({"role": "assistant", "content": answer})
        self.answers[chat].append(answer)
        self.samples.append((turn, ttft))
        self.prompt_tokens += tokens
        self.longest_prompt = max(self.longest_prompt, tokens)
        _progress(
            f"  {self.row.label}, chat {chat} turn {turn}: TTFT {ttft:.2f} s, {tokens} tokens"
        )


async def _measure(
    rows: Sequence[Row],
    workload: ChatWorkload,
    endpoints: Sequence[str],
    fleets: Sequence[list[tuple[str, str]]],
) -> tuple[list[RowResult], tuple[float, float]]:
    """Every row's warm-up, then every turn of every chat, the rows' requests
    interleaved one at a time (a different row first at each step); also the load
    average before and after."""
    chats = len(workload.conversations)
    lives = [
        _Live(
            row,
            workload,
            AsyncOpenAI(base_url=endpoint, api_key="unused", max_retries=0),
            workers,
            [[{"role": "system", "content": workload.system}] for _ in range(chats)],
            [[] for _ in range(chats)],
        )
        for row, endpoint, workers in zip(rows, endpoints, fleets, strict=True)
    ]
    try:
        async with asyncio.timeout(RUN_BUDGET_S):
            for live in lives:
                await live.warm()
            before = [WorkerCounts.read(live.workers) for live in lives]
            load_before = os.getloadavg()[0]
            turns = len(workload.conversations[0])
            for step, (chat, turn) in enumerate(interleave_turns(chats, turns)):
                for live in lives[step % len(lives) :] + lives[: step % len(lives)]:
                    await live.take_turn(chat, turn)
            load_after = os.getloadavg()[0]
            results = [
                RowResult(
                    live.row,
                    live.samples,
                    live.prompt_tokens,
                    live.longest_prompt,
                    WorkerCounts.read(live.workers).minus(earlier),
                    live.answers,
                )
                for live, earlier in zip(lives, before, strict=True)
            ]
    finally:
        for live in lives:
            await live.client.close()
    return results, (load_before, load_after)


def run_rows(
    rows: Sequence[Row], workload: ChatWorkload, sizing: Sizing, workers: Workers
) -> tuple[list[RowResult], tuple[float, float]]:
    """Every row on its own fleet and frontend, side by side."""
    with tempfile.TemporaryDirectory(prefix="kv-offload-") as tmp, contextlib.ExitStack() as stack:
        plans, fleets = [], []
        for i, row in enumerate(rows):
            state = Path(tmp) / f"row-{i}"
            cluster = cluster_spec(row, sizing, workers, state / "kv-disk")
            plan = write_plan(cluster, state, allocate_ports(sizing.fleet))
            _progress(f"starting {row.label}: {len(plan.workers)} workers")
            urls = stack.enter_context(run_workers(plan, STARTUP_S))
            fleets.append([(w.component, u) for w, u in zip(plan.workers, urls, strict=True)])
            plans.append(plan)
        _progress("starting the frontends")
        groups = stack.enter_context(run_frontends([(p, FRONTEND, 1) for p in plans], STARTUP_S))
        return asyncio.run(_measure(rows, workload, [g[0] for g in groups], fleets))


def _progress(line: str) -> None:
    print(f"kv-offload: {line}", file=sys.stderr, flush=True)


def _find(results: Sequence[RowResult], routing: RoutingPolicy, offload: bool) -> RowResult | None:
    return next((r for r in results if (r.row.routing, r.row.offload) == (routing, offload)), None)


def _p50(result: RowResult) -> float:
    return summarize_ttft(result.ttft)[0]


def _p90(result: RowResult) -> float:
    return summarize_ttft(result.ttft)[1]


def render(
    results: Sequence[RowResult],
    sizing: Sizing,
    workers: Workers,
    loads: Sequence[float],
) -> str:
    base = results[0]
    chats, turns = len(base.answers), len(base.answers[0])
    token_mib = workers.token_bytes / 2**20
    disk = (
        f"disk {sizing.disk_tokens:,} tokens "
        f"({'modelled' if workers.disk_is_modelled else 'NIXL POSIX'})"
        if has_disk_tier(workers)
        else "no disk"
    )
    lines = [
        f"{chats} chats x {turns} turns per row (+1 warm-up request), {MAX_TOKENS}-token "
        f"greedy answers; each row on its own {sizing.fleet} workers ({workers.description}, "
        "prefilling their own prompts) and frontend. Per worker: a "
        f"device KV pool of {sizing.pool_tokens:,} tokens ({sizing.pool_tokens * token_mib:,.0f}"
        f" MiB), with offload host {sizing.host_tokens:,} tokens and {disk}. The chats' "
        f"working set is about {sizing.working_set:,} tokens, "
        f"{sizing.working_set_ratio:.1f}x a fleet's device pools; the longest "
        f"prompt {sizing.longest_prompt:,} tokens as estimated from the model's chat template "
        f"({max(r.longest_prompt for r in results):,} as sent). "
        "Prompt tokens computed, from the device cache and onboarded from the tiers are the "
        "workers' counters (`tandem_worker_prompt_tokens_total{source=...}`, "
        "`tandem_worker_kv_offload_onboarded_blocks_total{tier=...}`). Rows ran side by "
        f"side, requests interleaved one at a time (load average {loads[0]:.1f} when the "
        f"measured requests began, {loads[1]:.1f} at the end).",
        "",
        "| row | TTFT p50 | TTFT p90 | TTFT p50 / first row's | TTFT p50 of turn "
        f"{' / '.join(str(t + 1) for t in range(turns))} | prompt tokens | computed | "
        "from device cache | onboarded (blocks from host / disk) | answers as the first row |",
        "|---|---:|---:|---:|---|---:|---:|---:|---|---|",
    ]
    for r in results:
        by_turn = " / ".join(f"{summarize_ttft(r.ttft_of_turn(t))[0]:.1f}" for t in range(turns))
        tiers = r.counts.onboarded_by_tier
        lines.append(
            f"| {r.row.label} | {_p50(r):.2f} s | {_p90(r):.2f} s | {_p50(r) / _p50(base):.2f}x "
            f"| {by_turn} s | {r.prompt_tokens:,} | {r.tokens('computed'):,.0f} | "
            f"{r.tokens('cache'):,.0f} | {r.tokens('offload'):,.0f} "
            f"({tiers.get('host', 0.0):,.0f} / {tiers.get('disk', 0.0):,.0f}) | "
            f"{_same_answers(base, r)} |"
        )
    lines += ["", _reading(results, sizing)]
    return "\n".join(lines)


def _same_answers(a: RowResult, b: RowResult) -> str:
    pairs = [
        (x, y)
        for xs, ys in zip(a.answers, b.answers, strict=True)
        for x, y in zip(xs, ys, strict=True)
    ]
    differ = sum(x != y for x, y in pairs)
    return "identical" if not differ else f"{differ} of {len(pairs)} differ"


def _judge(name: str, fast: RowResult, slow: RowResult) -> str:
    speedup = _p50(slow) / _p50(fast)
    verdict = "met" if speedup >= TARGET_SPEEDUP else "not met"
    return (
        f"{name}: TTFT p50 {speedup:.2f}x ({_p50(fast):.2f} s against {_p50(slow):.2f} s), "
        f"p90 {_p90(slow) / _p90(fast):.2f}x; {fast.tokens('computed'):,.0f} prompt tokens "
        f"computed against {slow.tokens('computed'):,.0f}. The target, TTFT p50 at least "
        f"{TARGET_SPEEDUP:.0f}x better, is {verdict} here."
    )


def _costs(result: RowResult, block: int) -> str:
    """What a prompt token cost the row's workers to compute and to onboard from each
    tier, over the run, and what the router made of it (``measured_tier_weights``)."""
    counts = result.counts
    computed = result.tokens("computed")
    if not computed or not counts.seconds.get("computed"):
        return ""
    prefill_s = counts.seconds["computed"] / computed
    onboard_s = {
        Tier(tier): counts.seconds.get(tier, 0.0) / (blocks * block)
        for tier, blocks in counts.onboarded_by_tier.items()
        if blocks > 0
    }
    weights = measured_tier_weights(prefill_s, onboard_s, DEFAULT_TIER_WEIGHTS)
    tiers = "".join(
        f", from {tier.value} {seconds * 1e6:,.1f} µs (worth {weights[tier]:.2f} of a "
        "computed token to the router)"
        for tier, seconds in onboard_s.items()
    )
    return (
        f" Per prompt token, {result.row.label}'s workers measured computing it at "
        f"{prefill_s * 1e6:,.1f} µs{tiers or ', and onboarded nothing'}."
    )


def _round_robin_pattern(chats: int, fleet: int, turns: int) -> str:
    """What round-robin's order left a chat's turns to find on their workers."""
    back = round_robin_return(chats, fleet)
    where = f"{chats} chats on {fleet} workers"
    if back == 1:
        return (
            f"Round-robin sent every turn of a chat to the same worker ({where}), as KV "
            "routing would: the comparison shows nothing here."
        )
    if back >= turns:
        return (
            f"Round-robin sent each of a chat's {turns} turns to another worker ({where}), "
            "so no turn found its chat's earlier turns: each computed its history past the "
            "shared system prompt (a router blind to the cache, on a fleet of this size)."
        )
    return (
        f"Round-robin sent a chat back to the same worker every {back} turns ({where}), so "
        f"a turn found its chat's history of {back} turns before (in that worker's tiers) "
        "and computed the turns between."
    )


def _reading(results: Sequence[RowResult], sizing: Sizing) -> str:
    ratio = sizing.working_set_ratio
    text = (
        f"**Reading.** The working set is {ratio:.1f}x a fleet's device pools (the issue "
        f"asks at least {WORKING_SET_FLOOR:.0f}x: "
        f"{'so it is' if ratio >= WORKING_SET_FLOOR else 'not so in this run'})."
    )
    offload = _find(results, RoutingPolicy.KV_AWARE, True)
    recompute = _find(results, RoutingPolicy.KV_AWARE, False)
    round_robin = _find(results, RoutingPolicy.ROUND_ROBIN, True)
    if offload is not None:
        text += _costs(offload, sizing.block)
    if offload is not None and recompute is not None:
        text += " " + _judge("Offload against none (both KV routing)", offload, recompute)
    if offload is not None and round_robin is not None:
        text += " " + _judge("KV routing against round-robin (both offload)", offload, round_robin)
        chats, turns = len(round_robin.answers), len(round_robin.answers[0])
        text += " " + _round_robin_pattern(chats, sizing.fleet, turns)
    differing = [r.row.label for r in results if _same_answers(results[0], r) != "identical"]
    text += (
        f" Greedy answers differ from the first row's in: {', '.join(differing)}."
        if differing
        else " Greedy answers are identical in every row."
    )
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tandem_dev.bench.kv_offload", description=__doc__
    )
    parser.add_argument("--chats", type=int, help="else as many as the working set needs")
    parser.add_argument("--workers", type=int, default=WORKERS, help="per row")
    parser.add_argument("--turns", type=int, default=TURNS)
    parser.add_argument("--rules", type=int, help="system prompt: house rules")
    parser.add_argument("--log-lines", type=int, help="tool output per turn")
    parser.add_argument("--row", type=int, action="append", help="run only these (index in ROWS)")
    parser.add_argument(
        "--hardware", choices=HARDWARE, help="simulated gpt-oss-120b workers (else SmolLM2)"
    )
    args = parser.parse_args(argv)
    on_gpu = args.hardware is not None
    workers = simulated_workers(args.hardware) if on_gpu else smollm2_workers()
    placeholder = " ".join(["ok"] * MAX_TOKENS)

    def size(chats: int) -> tuple[ChatWorkload, Sizing]:
        workload = build_tool_chat_workload(
            chats,
            args.turns,
            rules=args.rules or (GPU_RULES if on_gpu else RULES),
            log_lines=args.log_lines or (GPU_LOG_LINES if on_gpu else LOG_LINES),
        )
        longest, working_set = estimate_tokens(workload, workers.tokenizer, placeholder)
        sizing = size_tiers(longest, working_set, workers.block, HOST_POOLS, args.workers)
        return workload, sizing

    chats = args.chats or choose_chats(args.workers, lambda n: size(n)[1].working_set_ratio)
    workload, sizing = size(chats)
    rows = [ROWS[i] for i in args.row] if args.row else list(ROWS)
    results, loads = run_rows(rows, workload, sizing, workers)
    print(render(results, sizing, workers, loads))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
