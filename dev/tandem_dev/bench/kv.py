"""KV transfer benchmark: NIXL READ and TCP against memcpy measured in the same run.

The decode side (this process) pulls a sequence's KV from a prefill-side helper
process (``python -m tandem_dev.bench.kv --serve ...``) through the real transports, split
into descriptors of a fixed size. Between transfer repetitions it times ``np.copyto``
of the very same ranges between two local buffers, so every ratio compares numbers
taken under the same machine load. Ranges are listed in reverse order so that the
transport cannot coalesce them: the descriptor size is what is measured.

Bounded: at most ``reps`` repetitions per case and a wall-clock ``budget_s``; once the
budget is spent each remaining case gets one repetition.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from tandem.engines.base import KvRange
from tandem.kv import KvTransport, PeerInfo, make_transport, nixl_available
from tandem.security import CredentialBundle, CredentialStore, issue, write_bundle

logger = logging.getLogger(__name__)

KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True, slots=True)
class KvLayoutSpec:
    """The KV shape of a model: ``windowed_layers`` of ``layers`` keep only ``window``."""

    name: str
    layers: int
    windowed_layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int
    window: int

    @property
    def token_layer_bytes(self) -> int:
        return 2 * self.kv_heads * self.head_dim * self.dtype_bytes  # K and V

    def kv_bytes(self, tokens: int) -> int:
        full = self.layers - self.windowed_layers
        kept = full * tokens + self.windowed_layers * min(tokens, self.window)
        return kept * self.token_layer_bytes


# The reference engine's default model (engines/reference/config.py): 4 layers
# alternating 128-token window and full attention, 2 KV heads x 32, float32.
REFERENCE = KvLayoutSpec("reference", 4, 2, 2, 32, 4, 128)
# gpt-oss-120b: 36 layers alternating, 8 KV heads x 64, bf16 (1,212,678,144 B at 32k).
GPT_OSS_120B = KvLayoutSpec("gpt-oss-120b", 36, 18, 8, 64, 2, 128)

DEFAULT_CASES: tuple[tuple[KvLayoutSpec, int], ...] = (
    (REFERENCE, 1024),
    (REFERENCE, 8192),
    (REFERENCE, 32768),
    (GPT_OSS_120B, 32768),
)
DEFAULT_DESCRIPTOR_BYTES: tuple[int, ...] = (64 * KIB, MIB, 16 * MIB)


@dataclass(frozen=True, slots=True)
class TransportConfig:
    backend: str  # "nixl" | "tcp"
    ucx_tls: str | None = None  # NIXL only; None leaves UCX to choose
    mutual_tls: bool = False  # TCP only: both ends present the cluster's credentials

    @property
    def label(self) -> str:
        if self.backend != "nixl":
            return f"{self.backend}+mTLS" if self.mutual_tls else self.backend
        return f"nixl(UCX_TLS={self.ucx_tls or 'unset'})"


def plan_ranges(total: int, descriptor_bytes: int) -> list[KvRange]:
    """``total`` bytes from offset 0 in descriptors of ``descriptor_bytes``, reversed so
    that no two neighbours in the list are adjacent in memory (nothing coalesces)."""
    count = math.ceil(total / descriptor_bytes)
    ranges = [
        KvRange(0, i * descriptor_bytes, min(descriptor_bytes, total - i * descriptor_bytes))
        for i in range(count)
    ]
    return ranges[::-1]


def copy_ranges(src: np.ndarray, dst: np.ndarray, ranges: Sequence[KvRange]) -> None:
    for r in ranges:
        np.copyto(dst[r.offset : r.offset + r.length], src[r.offset : r.offset + r.length])


def _fill_pattern(buf: np.ndarray, seed: int) -> None:
    chunk = np.frombuffer(np.random.default_rng(seed).bytes(MIB), dtype=np.uint8)
    for start in range(0, buf.size, MIB):
        end = min(buf.size, start + MIB)
        buf[start:end] = chunk[: end - start]


@contextlib.contextmanager
def _ucx_env(ucx_tls: str | None) -> Iterator[None]:
    """UCX reads UCX_TLS when an agent is created; scope it to that moment."""
    before = os.environ.get("UCX_TLS")
    if ucx_tls is None:
        os.environ.pop("UCX_TLS", None)
    else:
        os.environ["UCX_TLS"] = ucx_tls
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("UCX_TLS", None)
        else:
            os.environ["UCX_TLS"] = before


@contextlib.asynccontextmanager
async def _serving_helper(
    config: TransportConfig, nbytes: int, credentials: Path | None
) -> AsyncIterator[PeerInfo]:
    env = dict(os.environ)
    env.pop("UCX_TLS", None)
    if config.ucx_tls is not None:
        env["UCX_TLS"] = config.ucx_tls
    tls = ["--serve-credentials", str(credentials)] if credentials is not None else []
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tandem_dev.bench.kv",
        "--serve",
        config.backend,
        "--serve-bytes",
        str(nbytes),
        *tls,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(120):
            line = ""
            while not line.startswith("READY "):  # NIXL may log to stdout first
                line = (await proc.stdout.readline()).decode()
                if not line:
                    raise RuntimeError("bench helper exited before it was ready")
        worker_id, incarnation, metadata = line.split()[1:4]
        yield PeerInfo(worker_id, incarnation, bytes.fromhex(metadata))
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


def _credential_options(credentials: Path | None) -> dict[str, object]:
    return {} if credentials is None else {"credentials": CredentialStore(credentials)}


async def _serve(backend: str, nbytes: int, credentials: Path | None) -> None:
    region = np.empty(nbytes, dtype=np.uint8)
    _fill_pattern(region, seed=1)
    incarnation = f"{os.getpid()}-{time.monotonic_ns()}"
    transport = make_transport(
        backend,
        worker_id="bench-prefill",
        incarnation=incarnation,
        **_credential_options(credentials),
    )
    await transport.register([region.data])
    transport.expect_reads(1)  # serves reads for its whole life, as if claimed
    metadata = transport.local_metadata().hex()
    print("READY", transport.worker_id, transport.incarnation, metadata, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await transport.close()


def _gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9 if seconds > 0 else 0.0


async def _measure_config(
    config: TransportConfig,
    cases: Sequence[tuple[KvLayoutSpec, int, int]],
    src: np.ndarray,
    dst: np.ndarray,
    reps: int,
    deadline: float,
    timeout_s: float,
    credentials: Path,
) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    nbytes = dst.size
    tls = credentials if config.mutual_tls else None
    async with _serving_helper(config, nbytes, tls) as peer:
        with _ucx_env(config.ucx_tls):
            transport: KvTransport = make_transport(
                config.backend,
                worker_id="bench-decode",
                incarnation=str(os.getpid()),
                **_credential_options(tls),
            )
        await transport.register([dst.data])
        try:
            for layout, tokens, descriptor_bytes in cases:
                total = layout.kv_bytes(tokens)
                ranges = plan_ranges(total, descriptor_bytes)
                await transport.read(peer, ranges, ranges, timeout_s)  # warm-up
                copy_ranges(src, dst, ranges)
                copies: list[float] = []
                reads: list[float] = []
                descriptors = 0
                for _ in range(reps if time.monotonic() < deadline else 1):
                    started = time.perf_counter()
                    copy_ranges(src, dst, ranges)
                    copies.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    stats = await transport.read(peer, ranges, ranges, timeout_s)
                    reads.append(time.perf_counter() - started)
                    descriptors = stats.descriptors
                memcpy = _gbps(total, statistics.median(copies))
                moved = _gbps(total, statistics.median(reads))
                rows.append(
                    {
                        "layout": layout.name,
                        "tokens": tokens,
                        "kv_bytes": total,
                        "descriptor_bytes": descriptor_bytes,
                        "descriptors": descriptors,
                        "transport": config.label,
                        "reps": len(reads),
                        "transfer_gbps": round(moved, 3),
                        "memcpy_gbps": round(memcpy, 3),
                        "ratio_vs_memcpy": round(moved / memcpy, 3) if memcpy else 0.0,
                    }
                )
                logger.info("%s", rows[-1])
        finally:
            await transport.close()
    return rows


def _add_ratio(rows: list[dict[str, object]], of: str, to: str, key: str) -> None:
    """``row[key]`` = throughput of transport ``of`` / that of ``to`` on the same case."""
    base_rows = {
        (r["layout"], r["tokens"], r["descriptor_bytes"]): r["transfer_gbps"]
        for r in rows
        if r["transport"] == to
    }
    for row in rows:
        if row["transport"] == of:
            base = base_rows.get((row["layout"], row["tokens"], row["descriptor_bytes"]))
            if isinstance(base, float) and base > 0:
                row[key] = round(float(str(row["transfer_gbps"])) / base, 3)


async def run_kv_bench_async(
    cases: Sequence[tuple[KvLayoutSpec, int]] = DEFAULT_CASES,
    descriptor_bytes: Sequence[int] = DEFAULT_DESCRIPTOR_BYTES,
    transports: Sequence[TransportConfig] | None = None,
    reps: int = 3,
    budget_s: float = 100.0,
    timeout_s: float = 60.0,
) -> list[dict[str, object]]:
    if transports is None:
        transports = default_transports()
    # Loopback only: UCX would otherwise also offer (and try) every other interface.
    os.environ.setdefault("UCX_NET_DEVICES", "lo")
    expanded = [(layout, tokens, d) for layout, tokens in cases for d in descriptor_bytes]
    nbytes = max(layout.kv_bytes(tokens) for layout, tokens in cases)
    src = np.empty(nbytes, dtype=np.uint8)
    _fill_pattern(src, seed=2)
    dst = np.ones(nbytes, dtype=np.uint8)  # touched, so page faults are not measured
    deadline = time.monotonic() + budget_s
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="tandem-bench-kv-") as tmp:
        credentials = Path(tmp) / "credentials"
        write_bundle(credentials, CredentialBundle.of(issue("bench", datetime.now(UTC))))
        for config in transports:
            rows += await _measure_config(
                config, expanded, src, dst, reps, deadline, timeout_s, credentials
            )
    _add_ratio(rows, "tcp", "nixl(UCX_TLS=unset)", "ratio_vs_nixl")
    _add_ratio(rows, "tcp+mTLS", "tcp", "ratio_vs_plain_tcp")
    return rows


def default_transports() -> list[TransportConfig]:
    configs = [TransportConfig("tcp"), TransportConfig("tcp", mutual_tls=True)]
    if nixl_available():
        configs = [TransportConfig("nixl"), TransportConfig("nixl", "tcp"), *configs]
    return configs


def run_kv_bench(
    cases: Sequence[tuple[KvLayoutSpec, int]] = DEFAULT_CASES,
    descriptor_bytes: Sequence[int] = DEFAULT_DESCRIPTOR_BYTES,
    transports: Sequence[TransportConfig] | None = None,
    reps: int = 3,
    budget_s: float = 100.0,
) -> list[dict[str, object]]:
    """Run the benchmark; one row per (transport, layout, tokens, descriptor size)."""
    return asyncio.run(
        run_kv_bench_async(cases, descriptor_bytes, transports, reps=reps, budget_s=budget_s)
    )


def format_markdown(rows: Sequence[dict[str, object]]) -> str:
    header = (
        "| transport | layout | tokens | KV bytes | descriptor | descriptors | GB/s "
        "| memcpy GB/s | vs memcpy | vs NIXL | vs plain TCP |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = [
        f"| {r['transport']} | {r['layout']} | {r['tokens']} | {r['kv_bytes']:,} "
        f"| {_size(int(str(r['descriptor_bytes'])))} | {r['descriptors']} "
        f"| {r['transfer_gbps']} | {r['memcpy_gbps']} | {r['ratio_vs_memcpy']} "
        f"| {r.get('ratio_vs_nixl', '')} | {r.get('ratio_vs_plain_tcp', '')} |"
        for r in rows
    ]
    return header + "\n".join(lines) + "\n"


def _size(nbytes: int) -> str:
    return f"{nbytes // MIB} MiB" if nbytes >= MIB else f"{nbytes // KIB} KiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="KV transfer benchmark (NIXL, TCP, memcpy)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=100.0)
    parser.add_argument("--json", action="store_true", help="print rows as JSON lines")
    parser.add_argument("--serve", choices=["nixl", "tcp"], help=argparse.SUPPRESS)
    parser.add_argument("--serve-bytes", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--serve-credentials", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.serve:
        asyncio.run(_serve(args.serve, args.serve_bytes, args.serve_credentials))
        return 0
    rows = run_kv_bench(reps=args.reps, budget_s=args.budget_s)
    if args.json:
        for row in rows:
            print(json.dumps(row))
    else:
        print(format_markdown(rows), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
