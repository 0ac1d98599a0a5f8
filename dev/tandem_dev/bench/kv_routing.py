"""KV-event routing vs round-robin vs the router's memory, on a shared-prefix chat load.

Real processes as ``tandem up`` plans them (``plan_local``: the same worker and frontend
command lines and documents): 2 prefill and 2 decode reference-engine workers running
SmolLM2-135M-Instruct from its GGUF -- a real model, so each answer is real text that
the next turn carries as history (the random model would answer noise) -- KV moved over
NIXL (TCP where NIXL is missing), the real frontend. Workers also serve ``/metrics``,
where their engines count prompt tokens computed and served from the prefix cache.

The load (``chat_workload``): a ~1,000-token system prompt shared by 3 customers who
each ask 3 questions in one conversation, the model's answers (6 tokens, greedy) fed
back as history. A warm-up request puts the system prompt in the caches first (not
measured: a busy service holds it already). Then every chat's first turn, every chat's
second, and so on, streamed through the official ``openai`` client, which measures TTFT.

Cases: the router as it is (KV events in Dynamo's radix tree), round-robin, and the
router-memory index it replaced (``tandem_dev.bench.router_memory``), each on one frontend;
then KV events and router memory on 2 frontend replicas fed by a load balancer without
session affinity (consecutive turns of a chat reach different replicas). The cases run
side by side on the same workers, each with its own frontends and its own desk (the
system prompt's first line, so no case finds another's blocks), their requests
interleaved one at a time with a pause longer than the routers' health round: whatever
load the (shared) machine carries hits every case alike, each request finds the workers
idle and is routed on what they cache (4 workers share 2 cores here; requests in
parallel would measure how the cores are shared, which GPU workers do not), and the
workers' counters move for one request at a time, so they are attributed exactly.
Bounded: 50 requests, a deadline for the whole run.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

from tandem.api.v1alpha1 import InferenceCluster, RoutingPolicy
from tandem.api.validate import parse_inference_cluster
from tandem.devcluster.ports import allocate_ports
from tandem.kv import nixl_available
from tandem.models.catalog import SMOLLM2_SOURCE
from tandem.security import issue
from tandem.security.credentials import utc_now
from tandem_dev.bench.chat_fleet import (
    SERVED,
    WorkerCounts,
    ask,
    diff_counts,
    scrape,
    write_plan,
)
from tandem_dev.bench.chat_workload import (
    ChatWorkload,
    add_counts,
    build_chat_workload,
    compute_replica,
    interleave_turns,
    sum_samples,
    summarize_ttft,
)
from tandem_dev.bench.local_fleet import FRONTEND, run_frontends, run_workers

ANCHOR_TTFT_SPEEDUP = 2.0  # Baseten's production figure for Dynamo's KV routing
CONVERSATIONS = 3
TURNS = 3
RULES = 32  # ~1,000 system-prompt tokens
MAX_TOKENS = 6  # short answers: decoding is not what routing changes
RUN_BUDGET_S = 1500.0
GAP_S = 1.5  # between requests: longer than the routers' health round (1 s)
STARTUP_S = 300.0
PREFILL_WORKERS = 2
DECODE_WORKERS = 2
ROUTER_MEMORY = "tandem_dev.bench.router_memory"


@dataclass(frozen=True, slots=True)
class Case:
    label: str
    routing: RoutingPolicy
    frontend_module: str
    replicas: int = 1


CASES = (
    Case("KV events (the router today)", RoutingPolicy.KV_AWARE, FRONTEND),
    Case("round-robin", RoutingPolicy.ROUND_ROBIN, FRONTEND),
    Case("router memory (the removed index)", RoutingPolicy.KV_AWARE, ROUTER_MEMORY),
    Case("KV events, 2 frontend replicas", RoutingPolicy.KV_AWARE, FRONTEND, 2),
    Case("router memory, 2 frontend replicas", RoutingPolicy.KV_AWARE, ROUTER_MEMORY, 2),
)


@dataclass(frozen=True, slots=True)
class CaseResult:
    case: Case
    samples: list[tuple[int, float]]  # (turn, TTFT in s) of every measured request
    prompt_tokens: int  # as the frontend reported them (usage)
    tokens: dict[str, float]  # worker prompt tokens by source: computed / cache
    computed_by_role: dict[str, float]  # prompt tokens computed: prefill / decode workers
    decisions: dict[str, float]  # router prefill decisions by path: remote / local
    kv_bytes: float

    @property
    def ttft(self) -> list[float]:
        return [t for _, t in self.samples]

    def ttft_of_turn(self, turn: int) -> list[float]:
        return [t for n, t in self.samples if n == turn]

    @property
    def computed(self) -> float:
        return self.tokens.get("computed", 0.0)


def cluster_spec(routing: RoutingPolicy) -> InferenceCluster:
    """The benchmarked cluster, as a user would write it for ``tandem up``."""
    doc = {
        "apiVersion": "tandem.dev/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": "kv-routing-bench"},
        "spec": {
            "model": {
                "name": "HuggingFaceTB/SmolLM2-135M-Instruct",
                "source": SMOLLM2_SOURCE,
                "servedName": SERVED,
                "maxInputTokens": 4096,
                "maxOutputTokens": MAX_TOKENS,
            },
            # 32,768 KV blocks of one layer each: ~17k tokens per worker, room for every
            # case's chats at once (the default pool would start evicting).
            "engine": {"kind": "reference", "options": {"num_kv_blocks": 32_768}},
            "frontend": {"routingPolicy": routing.value},
            "prefill": {"replicas": PREFILL_WORKERS},
            "decode": {"replicas": DECODE_WORKERS},
            "kvTransfer": {
                "backend": "nixl" if nixl_available() else "tcp",
                "ucxTransports": ["tcp"],
            },
        },
    }
    return parse_inference_cluster(doc, "kv-routing benchmark")


@dataclass(frozen=True, slots=True)
class _RouterCounts:
    decisions: dict[str, float]  # prefills by path: remote / local
    kv_bytes: float

    @classmethod
    def read(cls, endpoints: Sequence[str]) -> _RouterCounts:
        texts = scrape([e.removesuffix("/v1") + "/metrics" for e in endpoints])
        decisions = [sum_samples(t, "tandem_router_prefill_decisions_total", "path") for t in texts]
        moved = [sum_samples(t, "tandem_router_kv_transfer_bytes_total") for t in texts]
        return cls(add_counts(decisions), sum(add_counts(moved).values()))

    def minus(self, earlier: _RouterCounts) -> _RouterCounts:
        return _RouterCounts(
            diff_counts(self.decisions, earlier.decisions), self.kv_bytes - earlier.kv_bytes
        )


@dataclass(slots=True)
class _Live:
    """One case while the benchmark runs: its frontends, chats and what it measured."""

    case: Case
    workload: ChatWorkload
    clients: list[AsyncOpenAI]
    endpoints: list[str]
    histories: list[list[ChatCompletionMessageParam]]
    samples: list[tuple[int, float]] = dataclasses.field(default_factory=list)
    prompt_tokens: int = 0
    by_source: dict[str, float] = dataclasses.field(default_factory=dict)
    computed_by_role: dict[str, float] = dataclasses.field(default_factory=dict)

    async def warm(self) -> None:
        """Puts the system prompt in the caches (two tokens: the decode worker receives
        the prompt's KV, and caches it, too)."""
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": self.workload.system},
            {"role": "user", "content": "Hello."},
        ]
        await ask(self.clients[0], messages, 2)

    async def take_turn(self, chat: int, turn: int, workers: Sequence[tuple[str, str]]) -> None:
        """One measured request; the workers' counters move for it alone (requests go
        one at a time)."""
        messages = self.histories[chat]
        messages.append({"role": "user", "content": self.workload.conversations[chat][turn]})
        client = self.clients[compute_replica(chat, turn, len(self.clients))]
        before = WorkerCounts.read(workers)
        ttft, answer, tokens = await ask(client, messages, MAX_TOKENS)
        counts = WorkerCounts.read(workers).minus(before)
        messages.append({"role": "assistant", "content": answer})
        self.samples.append((turn, ttft))
        self.prompt_tokens += tokens
        self.by_source = add_counts([self.by_source, counts.by_source])
        self.computed_by_role = add_counts([self.computed_by_role, counts.computed_by_role])
        _progress(f"  {self.case.label}, chat {chat} turn {turn}: TTFT {ttft:.2f} s")


async def _measure(
    cases: Sequence[Case],
    workloads: Sequence[ChatWorkload],
    groups: Sequence[list[str]],
    workers: Sequence[tuple[str, str]],
) -> tuple[list[CaseResult], tuple[float, float]]:
    """Every case's warm-up, then every turn of every chat, the cases' requests
    interleaved one at a time (a different case first at each step), so the machine's
    load varies alike for all; also the load average before and after."""
    lives = [
        _Live(
            case,
            workload,
            [AsyncOpenAI(base_url=e, api_key="unused", max_retries=0) for e in endpoints],
            endpoints,
            [[{"role": "system", "content": workload.system}] for _ in workload.conversations],
        )
        for case, workload, endpoints in zip(cases, workloads, groups, strict=True)
    ]
    try:
        async with asyncio.timeout(RUN_BUDGET_S):
            for live in lives:
                await live.warm()
                await asyncio.sleep(GAP_S)
            routers = [_RouterCounts.read(live.endpoints) for live in lives]
            load_before = os.getloadavg()[0]
            steps = interleave_turns(CONVERSATIONS, TURNS)
            for step, (chat, turn) in enumerate(steps):
                for live in lives[step % len(lives) :] + lives[: step % len(lives)]:
                    await live.take_turn(chat, turn, workers)
                    # Every router's view of the workers' load lags up to a health round:
                    # let the finished request leave it before the next is routed.
                    await asyncio.sleep(GAP_S)
            load_after = os.getloadavg()[0]
            results = [
                _result(live, _RouterCounts.read(live.endpoints).minus(before))
                for live, before in zip(lives, routers, strict=True)
            ]
    finally:
        for live in lives:
            for client in live.clients:
                await client.close()
    return results, (load_before, load_after)


def _result(live: _Live, router: _RouterCounts) -> CaseResult:
    return CaseResult(
        live.case,
        live.samples,
        live.prompt_tokens,
        live.by_source,
        live.computed_by_role,
        router.decisions,
        router.kv_bytes,
    )


def run_cases(
    cases: Sequence[Case], workload: ChatWorkload
) -> tuple[list[CaseResult], tuple[float, float]]:
    """All cases side by side on the same workers, each with its own frontend(s) and
    its own desk (the system prompt's first line), so no case's prompts share a prefix
    with another's: each finds only its own blocks in the caches."""
    with tempfile.TemporaryDirectory(prefix="kv-routing-") as tmp:
        worker_ports = allocate_ports(PREFILL_WORKERS + DECODE_WORKERS)
        # One cluster's credentials: every case's frontend trusts the shared workers.
        issued = issue(cluster_spec(cases[0].routing).metadata.name, utc_now())
        plans = [
            write_plan(cluster_spec(case.routing), Path(tmp) / f"case-{i}", worker_ports, issued)
            for i, case in enumerate(cases)
        ]
        desks = [
            dataclasses.replace(workload, system=f"Desk {chr(65 + i)}. {workload.system}")
            for i in range(len(cases))
        ]
        _progress(f"starting {len(plans[0].workers)} workers")
        with run_workers(plans[0], STARTUP_S) as urls:
            workers = [(w.component, url) for w, url in zip(plans[0].workers, urls, strict=True)]
            groups = [
                (plan, c.frontend_module, c.replicas) for plan, c in zip(plans, cases, strict=True)
            ]
            _progress("starting the frontends")
            with run_frontends(groups, STARTUP_S) as endpoints:
                return asyncio.run(_measure(cases, desks, endpoints, workers))


def _progress(line: str) -> None:
    print(f"kv-routing: {line}", file=sys.stderr, flush=True)


def _find(
    results: Sequence[CaseResult], routing: RoutingPolicy, module: str, replicas: int
) -> CaseResult | None:
    return next(
        (
            r
            for r in results
            if (r.case.routing, r.case.frontend_module, r.case.replicas)
            == (routing, module, replicas)
        ),
        None,
    )


def render(results: Sequence[CaseResult], loads: tuple[float, float]) -> str:
    rr = _find(results, RoutingPolicy.ROUND_ROBIN, FRONTEND, 1)
    base = rr or results[0]
    base_p50, _ = summarize_ttft(base.ttft)
    turns = " / ".join(str(t + 1) for t in range(TURNS))
    lines = [
        f"{CONVERSATIONS} chats x {TURNS} turns per case (+1 warm-up request), "
        f"{MAX_TOKENS}-token answers; {PREFILL_WORKERS} prefill + {DECODE_WORKERS} decode "
        "workers (SmolLM2-135M-Instruct, reference engine), KV over "
        f"{'NIXL' if nixl_available() else 'TCP'}. Prompt tokens computed and served from "
        "the prefix caches are the workers' own counters "
        "(`tandem_worker_prompt_tokens_total{source=...}`, all workers); prefills remote / "
        "local and KV moved are the routers' counters. The cases ran side by side, their "
        "requests interleaved one at a time (load average "
        f"{loads[0]:.1f} when the measured requests began, {loads[1]:.1f} at the end).",
        "",
        "| routing | frontends | TTFT p50 | TTFT p90 | p50 vs round-robin | "
        f"TTFT p50 of turn {turns} | prompt tokens | computed (on prefill / decode workers) | "
        "from cache | computed vs round-robin | prefills remote / local | KV moved |",
        "|---|---:|---:|---:|---:|---|---:|---|---:|---:|---|---:|",
    ]
    for r in results:
        p50, p90 = summarize_ttft(r.ttft)
        by_turn = " / ".join(f"{summarize_ttft(r.ttft_of_turn(t))[0]:.1f}" for t in range(TURNS))
        lines.append(
            f"| {r.case.label} | {r.case.replicas} | {p50:.2f} s | {p90:.2f} s | "
            f"{base_p50 / p50:.2f}x | {by_turn} s | {r.prompt_tokens:,} | {r.computed:,.0f} "
            f"({r.computed_by_role.get('prefill', 0.0):,.0f} / "
            f"{r.computed_by_role.get('decode', 0.0):,.0f}) | "
            f"{r.tokens.get('cache', 0.0):,.0f} | {base.computed / max(r.computed, 1.0):.2f}x | "
            f"{r.decisions.get('remote', 0.0):.0f} / {r.decisions.get('local', 0.0):.0f} | "
            f"{r.kv_bytes / 2**20:,.0f} MiB |"
        )
    kv = _find(results, RoutingPolicy.KV_AWARE, FRONTEND, 1)
    if kv is not None and rr is not None:
        lines += ["", _reading(kv, rr, results)]
    return "\n".join(lines)


def _p50(result: CaseResult) -> float:
    return summarize_ttft(result.ttft)[0]


def _spread(a: float, b: float) -> float:
    return abs(a - b) / max(min(a, b), 1e-9)


def _moved(kv: CaseResult, rr: CaseResult) -> str:
    if kv.kv_bytes <= 0:
        return f"no KV moved against {rr.kv_bytes / 2**20:,.0f} MiB"
    return f"{rr.kv_bytes / kv.kv_bytes:.1f}x less KV moved"


def _decisions(result: CaseResult) -> tuple[int, int, int, int]:
    """What a case's routing did: tokens computed, remote and local prefills, MiB moved."""
    return (
        round(result.computed),
        round(result.decisions.get("remote", 0.0)),
        round(result.decisions.get("local", 0.0)),
        round(result.kv_bytes / 2**20),
    )


def _reading(kv: CaseResult, rr: CaseResult, results: Sequence[CaseResult]) -> str:
    speedup = _p50(rr) / _p50(kv)
    local = kv.decisions.get("local", 0.0)
    # Cases that routed exactly as the router today did the same work: how far their
    # TTFTs spread is the noise of this measurement (10% when no case matched).
    same = [r for r in results if _decisions(r) == _decisions(kv)]
    ttft_noise = max(0.1, max(_p50(r) for r in same) / min(_p50(r) for r in same) - 1)
    token_noise = 0.05
    twin = _find(results, RoutingPolicy.KV_AWARE, FRONTEND, 2)
    if twin is not None:  # replicas change nothing for KV events
        token_noise = max(token_noise, _spread(twin.computed, kv.computed))
    if speedup >= ANCHOR_TTFT_SPEEDUP and speedup > 1 + ttft_noise:
        verdict = "met here"
    elif speedup * (1 + ttft_noise) < ANCHOR_TTFT_SPEEDUP:
        verdict = "not met here"
    else:
        verdict = "not reached here, though within this run's noise of it"
    text = (
        f"**Reading.** KV-event routing against round-robin: TTFT p50 {speedup:.2f}x, "
        f"p90 {summarize_ttft(rr.ttft)[1] / summarize_ttft(kv.ttft)[1]:.2f}x faster; "
        f"{kv.computed:,.0f} prompt tokens computed against {rr.computed:,.0f}; "
        f"{_moved(kv, rr)}. The anchor, about 2x faster TTFT that Baseten reports in "
        "production from Dynamo's KV-aware routing (https://www.baseten.co/blog/"
        f"how-baseten-achieved-2x-faster-inference-with-nvidia-dynamo), is {verdict}."
    )
    if len(same) > 1:
        text += (
            f" Noise: the {len(same)} cases that routed exactly as the router today "
            f"({', '.join(r.case.label for r in same)}) spread by "
            f"{max(_p50(r) for r in same) / min(_p50(r) for r in same) - 1:.0%} in TTFT p50."
        )
    rr_on_prefill = rr.computed_by_role.get("prefill", 0.0) / max(rr.computed, 1.0)
    text += (
        " Requests go one at a time, so the policy's load terms tie and only the caches "
        "decide. KV routing sends each turn to the decode worker holding the longest "
        "prefix -- its own chat, answers included -- which prefills the new message itself "
        f"({local:.0f} of {len(kv.samples)} turns). Round-robin alternates decode workers "
        "and prefills remotely, on the prefill worker with the fewest queued tokens (ties "
        f"go to the first; {rr_on_prefill:.0%} of its computed tokens ran on prefill "
        "workers), whose own prefix cache holds every earlier prompt of the chats, and "
        "then moves the whole prompt's KV to a decode worker."
    )
    if rr.computed <= kv.computed * (1 + token_noise):
        text += (
            " With a prefix cache in every engine and two prefill workers, round-robin "
            "computes about as much: what it pays is the transfer and the extra hop."
        )
    else:
        text += (
            f" Round-robin also computes {rr.computed / max(kv.computed, 1.0):.2f}x the "
            "prompt tokens: history its prefill worker's cache does not hold."
        )
    for replicas in (1, 2):
        memory = _find(results, RoutingPolicy.KV_AWARE, ROUTER_MEMORY, replicas)
        events = _find(results, RoutingPolicy.KV_AWARE, FRONTEND, replicas)
        if memory is None or events is None:
            continue
        where = "one frontend" if replicas == 1 else f"{replicas} frontends"
        text += (
            f" Router memory on {where}: {memory.computed:,.0f} tokens computed against "
            f"{events.computed:,.0f} with KV events, remote prefills "
            f"{memory.decisions.get('remote', 0.0):.0f} against "
            f"{events.decisions.get('remote', 0.0):.0f}, TTFT p50 {_p50(memory):.2f} s "
            f"against {_p50(events):.2f} s."
        )
    memories = [r for r in results if r.case.frontend_module == ROUTER_MEMORY]
    better = [
        m.case.label
        for m in memories
        if (e := _find(results, RoutingPolicy.KV_AWARE, FRONTEND, m.case.replicas))
        and (m.computed * (1 + token_noise) < e.computed or _p50(m) * (1 + ttft_noise) < _p50(e))
    ]
    if better:
        text += (
            f" Router memory beat KV events beyond the noise ({', '.join(better)}): a "
            "measured reason to look at the hand-written index again."
        )
    elif memories:
        text += (
            " No figure here favours the hand-written index beyond the noise (it knows "
            "the prompts its own frontend routed, not the answers the decode workers also "
            "cache, and each replica only its own turns), so it stays out of the router, "
            "restored only as this baseline."
        )
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tandem_dev.bench.kv_routing", description=__doc__
    )
    parser.add_argument(
        "--case", type=int, action="append", help="run only these cases (index in CASES)"
    )
    args = parser.parse_args(argv)
    workload = build_chat_workload(CONVERSATIONS, TURNS, rules=RULES)
    chosen = [CASES[i] for i in args.case] if args.case else list(CASES)
    results, loads = run_cases(chosen, workload)
    print(render(results, loads))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
