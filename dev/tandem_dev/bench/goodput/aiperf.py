"""aiperf against a running cluster: its command line (pure), running it, and its
``profile_export_aiperf.json`` turned into a ``Point`` in modelled seconds.

aiperf 0.13 (``.bench/aiperf``, its own venv). Its ITL is per request: (request latency
- TTFT) / (output tokens - 1), percentiles over requests; TTFT is to the first content
token; its inter-chunk latency, per request, is every gap between two chunks of the
stream (chunks that arrive together count 0). Wall times are multiplied by the engines'
speed-up to give modelled time, rates divided by it.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tandem.sim.metrics import Percentiles
from tandem_dev.bench.goodput.points import (
    Point,
    Record,
    Split,
    compute_steady_throughput,
)
from tandem_dev.bench.goodput.stack import MODEL

AIPERF = Path(".bench/aiperf/bin/aiperf")


@dataclass(frozen=True, slots=True)
class AiperfRun:
    url: str  # the frontend, without /v1
    prompts: Path
    tokenizer: Path
    concurrency: int
    requests: int
    ramp_s: float  # wall seconds over which the first requests start
    artifacts: Path
    timeout_s: float


def render_command(run: AiperfRun, aiperf: Path = AIPERF) -> list[str]:
    return [
        str(aiperf), "profile",
        "--model", MODEL,
        "--url", run.url,
        "--endpoint-type", "chat",
        "--streaming",
        "--tokenizer", str(run.tokenizer),
        "--input-file", str(run.prompts),
        "--custom-dataset-type", "single_turn",
        "--use-server-token-count",
        "--concurrency", str(run.concurrency),
        "--request-count", str(run.requests),
        "--concurrency-ramp-duration", f"{run.ramp_s:.3f}",
        "--request-timeout-seconds", f"{run.timeout_s:.0f}",
        # A fresh connection per request: uvicorn closes idle keep-alive connections
        # after 5 s, and at slow speed-ups aiperf's pooled ones go stale between requests.
        "--connection-reuse-strategy", "never",
        "--workers-max", "1",
        "--ui", "none",
        "--no-server-metrics",
        "--no-gpu-telemetry",
        "--artifact-dir", str(run.artifacts),
    ]  # fmt: skip


def run_aiperf(run: AiperfRun) -> tuple[dict[str, Any], list[Record]]:
    """Run it; its JSON export and its per-request records. aiperf must not see
    HF_HUB_OFFLINE (it breaks with any value); the tokenizer directory is local."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    }
    done = subprocess.run(
        render_command(run), capture_output=True, text=True, env=env, timeout=run.timeout_s + 120,
        check=False,
    )  # fmt: skip
    export = run.artifacts / "profile_export_aiperf.json"
    if done.returncode != 0 or not export.exists():
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise RuntimeError(f"aiperf failed (exit {done.returncode}):\n{tail}")
    data: dict[str, Any] = json.loads(export.read_text())
    return data, read_records(run.artifacts / "profile_export.jsonl")


def read_records(path: Path) -> list[Record]:
    """Successful requests of aiperf's per-request export, in wall seconds."""
    records = []
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        meta, metrics = entry["metadata"], entry.get("metrics") or {}
        if "time_to_first_token" not in metrics or "output_sequence_length" not in metrics:
            continue  # failed or cancelled
        start = meta["request_start_ns"] / 1e9
        gaps = (metrics.get("inter_chunk_latency") or {}).get("value") or []
        records.append(
            Record(
                start,
                start + metrics["time_to_first_token"]["value"] / 1e3,
                meta["request_end_ns"] / 1e9,
                int(metrics["output_sequence_length"]["value"]),
                tuple(ms / 1e3 for ms in gaps),
            )
        )
    return records


def parse_export(
    data: dict[str, Any], records: list[Record], *, profile: str, isl: int, osl: int,
    split: Split, concurrency: int, speedup: float,
) -> Point:  # fmt: skip
    def scaled(metric: str) -> Percentiles:
        m = data[metric]
        return Percentiles(*(m[q] / 1e3 * speedup for q in ("p50", "p90", "p99")))

    errors = data.get("error_request_count") or {}
    return Point(
        source="aiperf",
        profile=profile,
        isl=isl,
        osl=osl,
        split=split,
        concurrency=concurrency,
        ttft=scaled("time_to_first_token"),
        itl=scaled("inter_token_latency"),
        tokens_per_second=compute_steady_throughput(records, concurrency) / speedup,
        tokens_per_second_per_user=data["output_token_throughput_per_user"]["p50"] / speedup,
        requests=int(data["request_count"]["avg"]),
        errors=int(errors.get("avg", 0)) if isinstance(errors, dict) else 0,
        speedup=speedup,
    )
