"""``make bench``: run every benchmark, each in its own process, and write one report.

Each section is a module with a ``main()`` that prints a markdown table of ratios measured
side by side in the same run (NIXL vs memcpy, TCP vs NIXL, batched vs one-by-one engine
steps, the live autoscaler vs an SLO oracle, operator vs a no-operator baseline). Running
them as separate processes keeps one benchmark's threads, UCX state and memory from
skewing the next.
Nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Section:
    key: str
    title: str
    module: str  # run as ``python -m MODULE``; its stdout is the section's markdown
    about: str
    timeout_s: float
    args: tuple[str, ...] = ()  # the module's command-line arguments


SECTIONS = (
    Section(
        "kv",
        "KV transfer: NIXL vs memcpy vs TCP",
        "tandem_dev.bench.kv",
        "KV blocks read by a decode-side agent from a prefill-side process over loopback, "
        "against numpy memcpy of the same bytes in the same run (reference-model KV of "
        "1k/8k/32k tokens, and the synthetic gpt-oss-120b 32k layout of 1,212,678,144 B); "
        "TCP both in plaintext and with mutual TLS 1.3 (the cluster's credentials, as "
        "workers run it in pods and under `tandem up`).",
        600,
    ),
    Section(
        "engine",
        "Reference engine: batched steps, chunked prefill, prefix cache (SmolLM2-135M)",
        "tandem_dev.bench.engine",
        "SmolLM2-135M-Instruct from its GGUF in the reference engine (numpy, one BLAS "
        "thread): batched decode against the same sequences stepped one by one, decode "
        "latency while a 4k-token prompt prefills on the same engine (in one call, as "
        "before batched steps, vs chunked into the steps) and while a prompt's KV comes "
        "back from the disk tier (read on the engine's thread vs beside the steps), "
        "prefill rate, the prefix cache on a shared system prompt, and a worker process's "
        "memory.",
        600,
    ),
    Section(
        "tensor-parallel",
        "Tensor parallelism across a Ray group: TP2 vs TP1 (SmolLM2-135M)",
        "tandem_dev.bench.tensor_parallel",
        "The reference engine's attention heads and MLP columns split across two ranks, "
        "each in a process of its own, placed by Ray: the leader started as a "
        "LeaderWorkerSet leader pod starts it (`tandem.worker.ray_launch`, token "
        "authentication on), its follower rank on the group's other node, the ranks' "
        "partial sums added over TCP every layer. Against TP1 in the same run: prefill and "
        "decode step times, the share of the all-reduce, start to ready, and the KV "
        "conversions a handoff with a TP1 worker needs, both ways.",
        600,
    ),
    Section(
        "kv-routing",
        "KV-event routing vs round-robin vs router memory (shared-prefix chats, SmolLM2)",
        "tandem_dev.bench.kv_routing",
        "Real processes as `tandem up` plans them (2 prefill + 2 decode reference-engine "
        "workers on SmolLM2-135M-Instruct, the real frontend, KV over NIXL), multi-turn "
        "chats behind one ~1,000-token system prompt, turns interleaved one request at a "
        "time through the `openai` client: TTFT and prompt tokens computed vs served from "
        "the workers' prefix "
        "caches, for the router as it is (workers' KV events in Dynamo's radix tree), "
        "round-robin, and the router-memory index it replaced (restored as a benchmark "
        "baseline, `tandem_dev.bench.router_memory`), on one and on two frontend replicas.",
        1800,
    ),
    Section(
        "kv-offload",
        "KV offload tiers: with and without offload, KV-event routing vs round-robin "
        "(long multi-turn chats, SmolLM2)",
        "tandem_dev.bench.kv_offload",
        "Real processes as `tandem up` plans them: per row, 4 reference-engine workers on "
        "SmolLM2-135M-Instruct prefilling their own prompts, and the real frontend. An "
        "agent's chats behind a ~1,000-token system prompt, each turn adding a ~300-token "
        "tool output to the history, sent one request at a time through the `openai` "
        "client; device KV pools sized so the chats' working set is over 4x a fleet's, "
        "evicted KV going to a host tier and a disk tier (NIXL POSIX). TTFT and prompt "
        "tokens computed for KV-event routing with offload and without, and round-robin "
        "with offload; greedy answers compared across rows (issue 37).",
        2700,
    ),
    Section(
        "kv-offload-gb200",
        "KV offload tiers at 32k: with and without offload, KV-event routing vs round-robin "
        "(long multi-turn chats, simulated GB200)",
        "tandem_dev.bench.kv_offload",
        "The kv-offload section's chats and rows, grown to 32k-token prompts (a ~10,000-token "
        "system prompt, ~5,700 tokens of tool output a turn), on simulated gpt-oss-120b GB200 "
        "workers in real time: prefill and onboarding cost what the step clock and the "
        "profile's host link (NVLink-C2C) and disk model, and the router weighs each "
        "worker's tiers by the costs it reports.",
        1800,
        ("--hardware", "gb200"),
    ),
    Section(
        "kv-index",
        "Router overhead with Dynamo's radix index populated (8k/32k prompts), index updates",
        "tandem_dev.bench.kv_index",
        "The router's KV index (ai-dynamo-runtime 1.6.1 `RadixTree`) filled as 32 workers "
        "of 15,488 blocks each would fill it: per-request cost of hashing, `find_matches` "
        "and the routing policy at 8k and 32k-token prompts, and events applied per "
        "second, against Dynamo's published indexer figures.",
        300,
    ),
    Section(
        "frontend",
        "Frontend + router overhead (32k-token prompts, null engine)",
        "tandem_dev.bench.frontend",
        "Server-side time per request for the real HTTP frontend and router, pinned to one "
        "core, with workers that answer at once: what Tandem itself adds to each request.",
        600,
    ),
    Section(
        "frontend-tokenizer",
        "Frontend with a real tokenizer: Tandem vs NVIDIA Dynamo 1.6.1 (32k-token English prompts)",
        "tandem_dev.bench.tokenizer_frontends",
        "Requests/s per frontend core on distinct 32,768-token English chat prompts, "
        "tokenized with SmolLM2's tokenizer by both: Tandem's frontend (tokenizer on its "
        "thread pool) and Dynamo's Rust frontend (kv router, mocker backends, file "
        "discovery), same client, same prompts, `max_tokens: 1`, in the same run. Equal "
        "prompt-token counts show both tokenized alike.",
        900,
    ),
    Section(
        "tenants",
        "Tenant queues: a light tenant's TTFT while a heavy tenant offers 10x capacity "
        "(simulated GB200)",
        "tandem_dev.bench.tenants",
        "One aggregated simulated gpt-oss-120b worker behind the real frontend with API "
        "keys for two tenants of equal weight: the light tenant's TTFT alone and while the "
        "heavy tenant offers 10x the measured capacity, with the frontend's tenant queues "
        "(`router.dispatchDepth` 2) and without them (every request straight to the "
        "worker's FIFO), each on a fresh frontend over the same worker (issue 34).",
        1200,
    ),
    Section(
        "faults",
        "Fault suite: every request counted (data plane)",
        "tandem_dev.bench.faults",
        "Each fault injected under steady load from the official `openai` client into a "
        "local InferenceCluster run by `tandem up`'s supervisor; what every request "
        "became, and how long until the cluster was whole again.",
        900,
    ),
    Section(
        "fuzz",
        "HTTP fuzz: 10,000 generated requests",
        "tandem_dev.bench.fuzz",
        "Hypothesis-generated HTTP requests against a running frontend: no 5xx, every 4xx "
        "an OpenAI error object, the server serving afterwards.",
        1800,
    ),
    Section(
        "soak",
        "Soak: 10 minutes at twice capacity",
        "tandem_dev.bench.soak",
        "A local cluster offered twice the capacity it just measured for 10 minutes: what "
        "it answered and refused, the latency of what it admitted, and whether any process "
        "grew (RSS, file descriptors, threads sampled from /proc).",
        1200,
    ),
    Section(
        "goodput",
        "Goodput at 1k/8k/32k ISL: aggregated vs disaggregated gpt-oss-120b (simulated GPUs)",
        "tandem_dev.bench.goodput",
        "aiperf drives the real stack whose simulated engines keep a GB200/B200-shaped clock; "
        "the same deployments in virtual time, and the rate-matched ideal, from the same "
        "performance model. Pareto plots in docs/img/.",
        7200,
    ),
    Section(
        "stalls",
        "Stream stalls at 32k ISL: every gap between tokens, aggregated vs disaggregated "
        "(simulated GPUs)",
        "tandem_dev.bench.goodput.stalls",
        "The goodput section's deployments judged token by token: a step that carries a "
        "chunk of another prompt's prefill holds every stream on its worker, which a "
        "per-request mean ITL dilutes. Virtual time for every deployment, aggregated "
        "workers at three prefill chunk sizes, and aiperf through the real stack at three "
        "of the points.",
        1800,
    ),
    Section(
        "planners",
        "tandem plan vs NVIDIA AIConfigurator: 108 cells, each judged by both",
        "tandem_dev.bench.planners",
        "gpt-oss-120b and gpt-oss-20b on GB200, B200 and H200 at ISL/OSL 1k/1k, 8k/1k and "
        "32k/1k, TPOT 6, 10 and 20 ms (TTFT 0.5, 1 and 2 s by ISL), two request rates each: "
        "`tandem plan`'s pick and AIConfigurator 0.12.0's (`cli recommend`, measured data "
        "only, in its own venv), each judged by the other tool too (AIConfigurator's "
        "estimator at the batch that carries the rate; Tandem's simulated cluster under "
        "Poisson arrivals). At 32k: each pick's longest gap between tokens, the fewest GPUs "
        "under a 30 ms bound, both tools' Pareto curves and disaggregation's largest gain "
        "in tokens/s/user at equal tokens/s/GPU.",
        7200,
    ),
    Section(
        "autoscale-live",
        "Autoscaler in the real loop vs the SLO oracle (simulated GB200)",
        "tandem_dev.bench.autoscale_live",
        "Traces replayed in real time by the `openai` client against `tandem up` with the "
        "builtin autoscaler starting, draining and stopping simulated gpt-oss-120b workers: "
        "the share of requests within the SLO and the GPU-seconds spent, against an oracle "
        "that finds per interval the fewest workers serving every request within the SLO "
        "on the same engines in virtual time.",
        4800,  # three policies x four traces of ~4 min each, real time
    ),
    Section(
        "adaptive",
        "Adaptive against static: planning auto vs the best static deployments (simulated GB200, "
        "B200)",
        "tandem_dev.bench.adaptive",
        "Steady chat, steady 32k RAG, a bursty mix, a diurnal ramp and a drift from 1k to 32k "
        "prompts, replayed in real time by the `openai` client against `tandem up`: the "
        "fewest-GPU static aggregated and disaggregated deployments `tandem plan` finds for "
        "each trace's average load and the ones NVIDIA's AIConfigurator picks for it, a "
        "hand-written shape under the builtin autoscaler, and "
        "`planning.mode: auto` deployed for the trace's first quarter (plan, autoscale, "
        "re-plan and roll). SLO attainment, "
        "GPU-seconds, goodput tokens/s/GPU, re-plans and rollouts, on simulated GB200 and "
        "B200 workers; plots in docs/img/adaptive-*.png.",
        18000,  # six rows x five traces x two GPUs of ~4.5 min each, real time
    ),
    Section(
        "real-node",
        "Real pods: images, the user's journey on a real kubelet, node memory",
        "tandem_dev.bench.real_node",
        "What running Tandem's own images on a real node costs and how fast it goes: the "
        "images and the kubelet built from scratch, then the journey a user takes (`helm "
        "install` → `kubectl port-forward` → the `openai` client → scale, kill, upgrade "
        "under load → delete), timed, with the node's memory.",
        2400,
    ),
    Section(
        "operator",
        "Operator: apply to Ready, memory",
        "tandem_dev.bench.operator",
        "InferenceClusters applied to the real test control plane (kwok nodes); the same "
        "pods as plain Deployments without the operator are the baseline.",
        900,
    ),
)


def _run(section: Section) -> str:
    commit = _commit() or "unknown"  # what runs is what was checked out at the start
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", section.module, *section.args],
            capture_output=True,
            text=True,
            timeout=section.timeout_s,
            check=False,
            # NIXL's Python logger writes INFO lines to stdout, which is the report. Its
            # names for levels (nixl logging.py): TRACE DEBUG INFO WARN ERROR FATAL; an
            # unknown one ("WARNING") keeps INFO and prints a warning into the report.
            env={**os.environ, "NIXL_LOG_LEVEL": "WARN"},
        )
    except subprocess.TimeoutExpired:
        return f"**Did not finish within {section.timeout_s:.0f} s.**\n"
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        return f"**Failed (exit {done.returncode}).**\n\n```\n{tail}\n```\n"
    return f"{done.stdout.strip()}\n\n_({elapsed:.0f} s, commit {commit})_\n"


def _commit() -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()


def _header() -> str:
    commit = _commit()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        "# Benchmarks\n\n"
        "Generated by `make bench` (`python -m tandem_dev.bench`). Every figure is a ratio or "
        "a distribution measured side by side in one run on the machine below; absolute "
        "numbers move with the machine, ratios much less. A partial run (`--only`) "
        "replaces just its sections; each section names the commit it measured.\n\n"
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n"
        f"- commit: {commit or 'unknown'}\n"
        f"- machine: {os.cpu_count()} CPUs, {platform.machine()}, Python "
        f"{platform.python_version()}; load average at start {load}\n"
    )


def merge_sections(report: str, fresh: dict[str, str], header: str) -> str:
    """``report`` with the sections titled in ``fresh`` replaced (or appended, in
    ``SECTIONS`` order) and the run header of the latest run (pure)."""
    _, *chunks = report.split("\n## ")
    sections = dict(chunk.split("\n\n", 1) for chunk in chunks)
    sections.update(fresh)
    order = [s.title for s in SECTIONS if s.title in sections]
    order += [t for t in sections if t not in order]
    return header + "".join(f"\n## {t}\n\n{sections[t].rstrip()}\n" for t in order)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tandem_dev.bench", description=__doc__)
    parser.add_argument("--write", type=Path, help="write the report here (else stdout)")
    parser.add_argument(
        "--only", action="append", choices=[s.key for s in SECTIONS], help="run only these"
    )
    args = parser.parse_args(argv)
    chosen = [s for s in SECTIONS if not args.only or s.key in args.only]
    parts = {}
    for section in chosen:
        print(f"bench: {section.key} ...", file=sys.stderr, flush=True)
        parts[section.title] = f"{section.about}\n\n{_run(section)}"
    if args.only and args.write and args.write.exists():
        # Some sections only: the others keep their last figures (each says its commit).
        report = merge_sections(args.write.read_text(), parts, _header())
    else:
        report = _header() + "".join(f"\n## {t}\n\n{b}" for t, b in parts.items())
    if args.write:
        args.write.write_text(report)
        print(f"wrote {args.write}", file=sys.stderr)
    else:
        sys.stdout.write(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
