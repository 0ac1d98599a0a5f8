"""Frontend requests/s per core with a real tokenizer on 32k-token English prompts:
Tandem's frontend next to NVIDIA Dynamo 1.6.1's Rust frontend, in the same run.

Both get the same prompts (distinct 32,768-token chat prompts cut from English prose:
the Python language reference shipped with the interpreter, ``pydoc_data.topics``), the
same tokenizer (SmolLM2's, from its GGUF file; exported as ``tokenizer.json`` for
Dynamo) and the same client, and answer with backends that return at once (Tandem's
in-process null workers; Dynamo's mocker, in its own processes). Each request is
``max_tokens: 1``: the cost measured is the frontend's -- parse, tokenize 32k tokens,
route, answer. Reported per frontend:

- requests/s with the frontend pinned to one core (two for "2 cores"), 8 in flight;
- requests per CPU-second of the frontend process (all its threads), the per-core
  figure independent of pinning;
- client latency at one request in flight.

The machine is shared, so each frontend is measured in ``ROUNDS`` interleaved rounds
(Dynamo, Tandem, Tandem on 2 cores, again) and the table shows the median round, the
others beside it. The usage both servers report (prompt tokens) is shown too: equal
numbers mean both tokenized alike. Bounded: fixed request counts and a time budget per
phase.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tandem.models.catalog import SMOLLM2_SOURCE
from tandem.models.source import resolve_local_model_file
from tandem.tokenization import ChatMessage
from tandem.tokenization.gguf_tokenizer import GgufTokenizer, load_gguf_tokenizer
from tandem_dev.bench.dynamo_baseline import dynamo_available, dynamo_frontend, export_model_dir
from tandem_dev.bench.http_load import Connection, drive, percentile

PROMPT_TOKENS = 32768
PROMPTS = 16
MODEL = "bench"
CONCURRENCY = 8
LATENCY_REQUESTS = 20
THROUGHPUT_REQUESTS = 160
BUDGET_S = 60.0
ROUNDS = 3


def english_prompts(tokenizer: GgufTokenizer, count: int, tokens: int) -> list[str]:
    """``count`` distinct user messages whose chat prompts are ``tokens`` long (within a
    few tokens: cutting at a token boundary can merge differently when re-encoded)."""
    import pydoc_data.topics

    corpus = "\n\n".join(pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics))
    overhead = len(tokenizer.apply_chat_template([ChatMessage("user", "")]))
    window = 5 * tokens  # characters: English runs ~4 per token here
    stride = max(1, (len(corpus) - window) // count)
    prompts = []
    room = tokens - overhead - 8  # the "[n] " each request starts with
    for index in range(count):
        ids = tokenizer.encode(corpus[index * stride : index * stride + window])
        prompts.append(tokenizer.decode(ids[:room]))
    return prompts


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _usage_prompt_tokens(port: int, body: bytes) -> int:
    connection = await Connection.open(port)
    try:
        status, reply = await connection.request("POST", "/v1/chat/completions", body)
    finally:
        connection.close()
    if status != 200:
        raise RuntimeError(f"status {status}: {reply[:200]!r}")
    return int(json.loads(reply)["usage"]["prompt_tokens"])


async def _measure(port: int, pid: int, bodies: Sequence[bytes]) -> dict[str, object]:
    prompt_tokens = await _usage_prompt_tokens(port, bodies[0])
    # Each body is sent once: warm-up, then one at a time, then CONCURRENCY at a time.
    warm = bodies[1 : 2 * PROMPTS + 1]
    timed = bodies[2 * PROMPTS + 1 : 2 * PROMPTS + 1 + LATENCY_REQUESTS]
    loaded = bodies[-THROUGHPUT_REQUESTS:]
    await drive(port, warm, len(warm), 2, BUDGET_S)
    latencies, _, errors = await drive(port, timed, LATENCY_REQUESTS, 1, BUDGET_S)
    cpu_before = _cpu_seconds(pid)
    done, elapsed, more = await drive(port, loaded, THROUGHPUT_REQUESTS, CONCURRENCY, BUDGET_S)
    cpu = _cpu_seconds(pid) - cpu_before
    return {
        "prompt_tokens": prompt_tokens,
        "requests": len(done),
        "requests_per_s": len(done) / elapsed,
        "requests_per_cpu_s": len(done) / cpu if cpu > 0 else 0.0,
        "client_p50_ms": 1e3 * statistics.median(latencies),
        "client_p99_ms": 1e3 * percentile(latencies, 0.99),
        "errors": errors + more,
    }


def _free_port() -> int:
    from tandem.devcluster.ports import allocate_ports

    return allocate_ports(1)[0]


def _run_tandem(bodies: Sequence[bytes], cores: set[int]) -> dict[str, object]:
    port = _free_port()
    argv = [sys.executable, "-m", "tandem_dev.bench.tokenizer_frontends", "--serve"]
    argv += ["--port", str(port), "--cores", ",".join(map(str, sorted(cores)))]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _await_line(server, "READY", 120)
        return asyncio.run(_measure(port, server.pid, bodies))
    finally:
        server.terminate()
        server.wait(timeout=30)


def _run_dynamo(
    tokenizer: GgufTokenizer, bodies: Sequence[bytes], cores: set[int]
) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="dynamo-model-") as directory:
        model_dir = export_model_dir(tokenizer, Path(directory), context=2 * PROMPT_TOKENS)
        port = _free_port()
        with dynamo_frontend(model_dir, model=MODEL, port=port, frontend_cores=cores) as run:
            return asyncio.run(_measure(port, run.frontend_pid, bodies))


def _await_line(process: subprocess.Popen[bytes], prefix: str, timeout_s: float) -> None:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = process.stdout.readline().decode()
        if line.startswith(prefix):
            return
        if not line and process.poll() is not None:
            break
    process.kill()
    raise RuntimeError("the benchmark frontend did not start")


def run_bench() -> list[dict[str, object]]:
    tokenizer = load_gguf_tokenizer(resolve_local_model_file(SMOLLM2_SOURCE))
    prompts = english_prompts(tokenizer, PROMPTS, PROMPT_TOKENS)
    total = 2 * len(prompts) + LATENCY_REQUESTS + THROUGHPUT_REQUESTS + 1
    sent = 0

    def fresh_bodies() -> list[bytes]:
        # Every request is new text (a numbered variant of a prompt), never repeated in
        # the run: a frontend that caches tokenization by text would not tokenize at all.
        nonlocal sent
        start, sent = sent, sent + total
        return [_body(f"[{n}] {prompts[n % len(prompts)]}") for n in range(start, sent)]

    cores = sorted(os.sched_getaffinity(0))
    one, two = {cores[0]}, set(cores[:2])
    client = set(cores[1:]) or set(cores)  # beside the pinned frontend when possible
    runs: dict[str, list[dict[str, object]]] = {}
    try:
        for _ in range(ROUNDS):
            os.sched_setaffinity(0, client)
            if dynamo_available():
                result = _run_dynamo(tokenizer, fresh_bodies(), one)
                runs.setdefault("Dynamo 1.6.1 (Rust), 1 core", []).append(result)
            runs.setdefault("Tandem, 1 core", []).append(_run_tandem(fresh_bodies(), one))
            if len(two) > 1:
                os.sched_setaffinity(0, two)
                runs.setdefault("Tandem, 2 cores", []).append(_run_tandem(fresh_bodies(), two))
    finally:
        os.sched_setaffinity(0, set(cores))
    return [_median_row(name, results) for name, results in runs.items()]


def _body(content: str) -> bytes:
    message = {"role": "user", "content": content}
    return json.dumps({"model": MODEL, "messages": [message], "max_tokens": 1}).encode()


def _median_row(name: str, results: list[dict[str, object]]) -> dict[str, object]:
    """The round with the median requests/s, and every round's figure."""
    ordered = sorted(results, key=lambda r: float(r["requests_per_s"]))  # type: ignore[arg-type]
    row = dict(ordered[len(ordered) // 2])
    row["frontend"] = name
    row["rounds_requests_per_s"] = [round(float(r["requests_per_s"]), 1) for r in results]  # type: ignore[arg-type]
    return row


def format_markdown(rows: Sequence[dict[str, object]], cores: int | None = None) -> str:
    """The table, and what the core pinning meant on a machine of ``cores`` CPUs."""
    header = (
        "| frontend | prompt tokens (server's usage) | requests/s (pinned, median round) "
        "| every round | requests per CPU-second | client p50 ms (1 in flight) "
        "| client p99 ms | errors |\n"
        "|---|---:|---:|---|---:|---:|---:|---:|\n"
    )
    body = "".join(
        f"| {r['frontend']} | {r['prompt_tokens']} | {r['requests_per_s']:.1f} "
        f"| {', '.join(str(x) for x in r['rounds_requests_per_s'])} "  # type: ignore[attr-defined]
        f"| {r['requests_per_cpu_s']:.1f} | {r['client_p50_ms']:.1f} "
        f"| {r['client_p99_ms']:.1f} | {r['errors']} |\n"
        for r in rows
    )
    note = (
        ""
        if any("Dynamo" in str(r["frontend"]) for r in rows)
        else (
            "\nDynamo's frontend was not measured: `make bench` installs it in `.bench/dynamo`.\n"
        )
    )
    return (
        header
        + body
        + note
        + _pinning_note(len(os.sched_getaffinity(0)) if cores is None else cores)
    )


def _pinning_note(cores: int) -> str:
    """The load client runs beside a pinned frontend only where a core is left for it."""
    if cores >= 3:
        return ""
    return (
        f"\nOn this {cores}-core machine the 1-core rows leave the other core to the load "
        'client, but the "2 cores" row pins the frontend to the cores the client also '
        "runs on: it measures a 2-core frontend sharing them with its load, not a 2-core "
        "frontend's capacity. Requests per "
        "CPU-second counts only the frontend's own CPU time: that column compares the "
        "frontends fairly; a 2-core figure needs a machine with a third core for the "
        "client.\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tandem_dev.bench.tokenizer_frontends")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--cores", default="", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.serve:
        if args.cores:
            os.sched_setaffinity(0, {int(c) for c in args.cores.split(",")})
        from tandem_dev.bench.frontend import serve_frontend

        tokenizer = load_gguf_tokenizer(resolve_local_model_file(SMOLLM2_SOURCE))
        asyncio.run(serve_frontend(args.port, 1, [], tokenizer, PROMPT_TOKENS))
        return 0
    rows = run_bench()
    print(json.dumps(rows, indent=2) if args.json else format_markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
