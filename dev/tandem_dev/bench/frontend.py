"""Frontend + router overhead per request, with 32k-token prompts and a null engine.

A server process (``python -m tandem_dev.bench.frontend --serve``) runs the real frontend --
HTTP parsing, validation, tokenization and chat templating of a 32k-token prompt,
routing, response assembly -- over in-process null workers that answer at once, pinned
to one CPU core. It times every request from the moment the ASGI app is called to its
last byte (server-side overhead). This process, on another core when there is one,
drives it over loopback with keep-alive HTTP/1.1 connections: one at a time for latency,
then ``concurrency`` at a time for requests/s.

Bounded: fixed request counts and a wall-clock budget per phase.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from tandem.api.v1alpha1 import ModelSpec
from tandem.frontend.config import DisaggregationSettings, FrontendConfig, FrontendSettings
from tandem.tokenization import ByteTokenizer, ChatMessage, Tokenizer
from tandem_dev.bench.http_load import Connection, drive, percentile

PROMPT_TOKENS = 32768
MODEL = "bench"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    prefill_workers: int  # 0: every request prefills locally on the decode worker
    stream: bool
    grpc: bool = False  # null workers in their own processes, reached over gRPC


CASES = (
    Case("32k chat, remote prefill", 1, False),
    Case("32k chat, local prefill (prefill pool at 0)", 0, False),
    Case("32k chat, remote prefill, SSE", 1, True),
    Case("32k chat, remote prefill, gRPC to null worker processes", 1, False, grpc=True),
)


def prompt_text(tokens: int = PROMPT_TOKENS) -> str:
    """User content whose chat-templated prompt is exactly ``tokens`` tokens long."""
    overhead = len(ByteTokenizer().apply_chat_template([ChatMessage("user", "")]))
    return "a" * (tokens - overhead)


# --------------------------------------------------------------------------- server side


def _timed(app: Asgi, timings: list[float]) -> Asgi:
    async def wrapper(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/bench/timings":
            body = json.dumps(timings).encode()
            timings.clear()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": body})
            return
        started = time.perf_counter()
        await app(scope, receive, send)
        if scope["type"] == "http":
            timings.append(time.perf_counter() - started)

    return wrapper


async def serve_frontend(
    port: int,
    prefill_workers: int,
    worker_addresses: list[str],
    tokenizer: Tokenizer | None = None,
    prompt_tokens: int = PROMPT_TOKENS,
) -> None:
    """The benchmarked frontend over null workers; prints ``READY <port>``."""
    from prometheus_client import CollectorRegistry

    from tandem.frontend.server import build_frontend, serve
    from tandem.router.membership import Member, StaticMembership
    from tandem.router.policy import WorkerRole
    from tandem.router.ports import WorkerClientFactory
    from tandem.tokenization.selection import fingerprint
    from tandem.worker.client import WorkerClient
    from tandem_dev.doubles.inprocess import InProcessCluster, InProcessWorker, KvLedger

    tokenizer = tokenizer or ByteTokenizer()
    roles = {f"prefill-{i}": WorkerRole.PREFILL for i in range(prefill_workers)}
    roles["decode-0"] = WorkerRole.DECODE
    factory: WorkerClientFactory
    if worker_addresses:  # prefill addresses first, then the decode worker's
        roles = dict(zip(worker_addresses, roles.values(), strict=True))
        factory = WorkerClient
    else:
        ledger = KvLedger()
        same = fingerprint(tokenizer)
        factory = InProcessCluster(
            [InProcessWorker(a, r, ledger, tokenizer_fingerprint=same) for a, r in roles.items()]
        )
    config = FrontendConfig(
        model=ModelSpec(name=MODEL, max_input_tokens=prompt_tokens + 1024, max_output_tokens=16),
        frontend=FrontendSettings(
            disaggregation=DisaggregationSettings(min_prefill_tokens=512),
            max_queued_requests=4096,
        ),
    )
    app, _ = build_frontend(
        config,
        factory,
        tokenizer=tokenizer,
        membership=StaticMembership([Member(a, r) for a, r in roles.items()]),
        registry=CollectorRegistry(),
    )
    timings: list[float] = []
    await serve(_timed(app, timings), "127.0.0.1", port)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- client side


async def _server_timings(port: int) -> list[float]:
    connection = await Connection.open(port)
    try:
        _, body = await connection.request("GET", "/bench/timings")
    finally:
        connection.close()
    return [float(t) for t in json.loads(body)]


def _start_server(
    case: Case, core: int | None, workers: list[str]
) -> tuple[subprocess.Popen[bytes], int]:
    from tandem.devcluster.ports import allocate_ports

    port = allocate_ports(1)[0]
    argv = [sys.executable, "-m", "tandem_dev.bench.frontend", "--serve", "--port", str(port)]
    argv += ["--prefill-workers", str(case.prefill_workers)]
    argv += [arg for address in workers for arg in ("--worker", address)]
    if core is not None:
        argv += ["--core", str(core)]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return server, _await_ready(server)


def _await_ready(process: subprocess.Popen[bytes]) -> int:
    assert process.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline().decode()
        if line.startswith("READY"):
            return int(line.split()[1])
        if not line and process.poll() is not None:
            break
    process.kill()
    raise RuntimeError("a benchmark process did not start")


def _start_null_workers(case: Case) -> list[subprocess.Popen[bytes]]:
    roles = ["prefill"] * case.prefill_workers + ["decode"]
    return [
        subprocess.Popen(
            [sys.executable, "-m", "tandem_dev.doubles.null_worker", "--role", role],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for role in roles
    ]


async def _run_case(
    case: Case, port: int, requests: int, concurrency: int, budget_s: float
) -> dict[str, object]:
    payload: dict[str, object] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt_text()}],
        "max_tokens": 1,
        "stream": case.stream,
    }
    body = json.dumps(payload).encode()
    await drive(port, [body], 50, 1, budget_s)  # warm-up
    await _server_timings(port)
    latencies, _, errors = await drive(port, [body], requests, 1, budget_s)
    server = await _server_timings(port)
    _, elapsed, more_errors = await drive(port, [body], requests * 3, concurrency, budget_s)
    done = len(await _server_timings(port))
    return {
        "case": case.name,
        "requests": len(latencies),
        "server_p50_ms": 1e3 * statistics.median(server),
        "server_p99_ms": 1e3 * percentile(server, 0.99),
        "client_p50_ms": 1e3 * statistics.median(latencies),
        "client_p99_ms": 1e3 * percentile(latencies, 0.99),
        "requests_per_s": done / elapsed,
        "concurrency": concurrency,
        "errors": errors + more_errors,
        "body_bytes": len(body),
    }


def run_frontend_bench(
    *, requests: int = 300, concurrency: int = 8, budget_s: float = 60.0
) -> list[dict[str, object]]:
    """One row per case; the server is pinned to one core, the client to another."""
    cores = sorted(os.sched_getaffinity(0))
    server_core = cores[0] if len(cores) > 1 else None
    if len(cores) > 1:
        os.sched_setaffinity(0, set(cores[1:]))
    rows = []
    try:
        for case in CASES:
            workers = _start_null_workers(case) if case.grpc else []
            try:
                addresses = [f"127.0.0.1:{_await_ready(w)}" for w in workers]
                server, port = _start_server(case, server_core, addresses)
                try:
                    row = asyncio.run(_run_case(case, port, requests, concurrency, budget_s))
                finally:
                    server.terminate()
                    server.wait(timeout=30)
            finally:
                for worker in workers:
                    worker.terminate()
                    worker.wait(timeout=30)
            row["server_core_pinned"] = server_core is not None
            rows.append(row)
    finally:
        os.sched_setaffinity(0, set(cores))
    return rows


def format_markdown(rows: Sequence[dict[str, object]]) -> str:
    header = (
        "| case | server p50 ms | server p99 ms | client p50 ms | client p99 ms "
        "| requests/s (1 core) | errors |\n|---|---:|---:|---:|---:|---:|---:|\n"
    )
    body = "".join(
        f"| {r['case']} | {r['server_p50_ms']:.2f} | {r['server_p99_ms']:.2f} "
        f"| {r['client_p50_ms']:.2f} | {r['client_p99_ms']:.2f} "
        f"| {r['requests_per_s']:.0f} | {r['errors']} |\n"
        for r in rows
    )
    return header + body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tandem_dev.bench.frontend")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--prefill-workers", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--core", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="append", default=[], help=argparse.SUPPRESS)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.serve:
        if args.core is not None:
            os.sched_setaffinity(0, {args.core})
        asyncio.run(serve_frontend(args.port, args.prefill_workers, args.worker))
        return 0
    rows = run_frontend_bench(requests=args.requests, concurrency=args.concurrency)
    print(json.dumps(rows, indent=2) if args.json else format_markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
