"""``python -m tandem.worker --engine trtllm`` as real processes on 127.0.0.1.

A prefill and a decode worker run the trtllm engine against the fake ``tensorrt_llm``
(tests/fakes, mirroring 1.2.1), configured exactly as the operator configures them: the
worker documents rendered by ``tandem_operator.render.contract`` for the GB200 example (the
pool's TensorRT-LLM options included). The fake's cache transceiver parks KV in a shared
directory, so KV crosses the process boundary as with two real TensorRT-LLM instances.
Disaggregated output must equal aggregated output token for token.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from tandem.api.v1alpha1 import PoolRole
from tandem.api.validate import load_inference_cluster
from tandem.engines.base import SamplingParams
from tandem.worker.client import WorkerClient
from tandem.worker.types import PrefillReply
from tandem_operator.render.contract import dump_config, render_worker_config

pytestmark = [pytest.mark.integration, pytest.mark.parallel]

ROOT = Path(__file__).resolve().parents[2]
FAKES = ROOT / "tests" / "fakes"
EXAMPLE = ROOT / "manifests" / "examples" / "gpt-oss-120b-gb200.yaml"
SAMPLING = SamplingParams(max_tokens=12)
PROMPT_LENGTHS = (1, 31, 32, 33, 257, 4096, 32_768)


class Workers:
    """Starts trtllm workers configured as the operator configures them."""

    def __init__(self, tmp: Path, launcher: Any) -> None:
        self.tmp = tmp
        self.launcher = launcher
        self.fabric = tmp / "fabric"
        self.fabric.mkdir()

    async def start(self, role: PoolRole, worker_id: str) -> Any:
        cluster = load_inference_cluster(EXAMPLE)
        config = self.tmp / f"{role.value}.json"
        config.write_text(dump_config(render_worker_config(cluster, role)))
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(FAKES), os.environ.get("PYTHONPATH", "")]),
            "TANDEM_FAKE_TRTLLM_FABRIC_DIR": str(self.fabric),
        }
        args = [
            f"--config={config}",
            "--engine=trtllm",
            f"--worker-id={worker_id}",
            "--port=0",
            "--rpc-timeout-s=10",
        ]
        log = self.tmp / f"{worker_id}.log"
        return await self.launcher.start(worker_id, args, log=log, env=env, stop_grace_s=20)


@pytest.fixture
def workers(tmp_path: Path, worker_launcher: Any) -> Workers:
    return Workers(tmp_path, worker_launcher)


def prompt_of(length: int, seed: int) -> list[int]:
    return [(seed * 131 + 17 * i) % 997 + 3 for i in range(length)]


async def stream(
    client: WorkerClient, request_id: str, prompt: list[int], reply: PrefillReply | None = None
) -> list[int]:
    tokens: list[int] = []
    async for chunk in client.decode(
        request_id,
        prompt,
        SAMPLING,
        remote_kv=reply.kv if reply else None,
        first_token=reply.first_token if reply else None,
    ):
        tokens.extend(chunk.token_ids)
    return tokens


async def test_disaggregated_output_equals_aggregated(workers: Workers) -> None:
    prefill, decode = await asyncio.gather(
        workers.start(PoolRole.PREFILL, "prefill-0"), workers.start(PoolRole.DECODE, "decode-0")
    )
    for i, length in enumerate(PROMPT_LENGTHS):
        prompt = prompt_of(length, seed=i)
        reply = await prefill.client.prefill(f"r{i}", prompt, SAMPLING)
        assert reply.kv is not None and reply.kv.opaque and reply.kv.ranges == ()
        disaggregated = await stream(decode.client, f"r{i}", prompt, reply)
        aggregated = await stream(decode.client, f"a{i}", prompt)
        assert disaggregated == aggregated, f"prompt of {length} tokens diverged"
        assert len(aggregated) == SAMPLING.max_tokens

    stats = await prefill.client.stats()
    assert stats.held_for_transfer == 0  # each decode told the prefill worker it was done
    # KV handed over in the shared fabric was consumed: nothing is left parked.
    assert not [p for p in workers.fabric.iterdir() if p.suffix == ".json"]
    # The worker logs its engine and the TensorRT-LLM release it loaded.
    assert "TensorRT-LLM 1.2.1" in prefill.log.read_text()


async def test_a_prompt_beyond_the_transfer_buffer_is_refused(workers: Workers) -> None:
    prefill = await workers.start(PoolRole.PREFILL, "prefill-0")
    # model.maxInputTokens 32768 renders max_tokens_in_buffer 32768; the fake fails a
    # context-only request that would not fit, as the real transceiver would hang.
    with pytest.raises(Exception, match="max_tokens_in_buffer"):
        await prefill.client.prefill("big", prompt_of(32_769, seed=1), SAMPLING)


async def test_sigterm_drains_and_exits(workers: Workers) -> None:
    decode = await workers.start(PoolRole.DECODE, "decode-0")
    assert len(await stream(decode.client, "one", prompt_of(10, seed=3))) == SAMPLING.max_tokens
    decode.proc.terminate()
    assert await asyncio.wait_for(decode.proc.wait(), 30) == 0
    assert "drained" in decode.log.read_text()
