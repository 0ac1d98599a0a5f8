"""``python -m tandem.worker --engine trtllm`` as real processes on 127.0.0.1.

A prefill and a decode worker run the trtllm engine against the fake ``tensorrt_llm``
(tests/fakes, mirroring 1.2.1), configured exactly as the operator configures them: the
worker documents rendered by ``tandem_operator.contract`` for the GB200 example (the
pool's TensorRT-LLM options included). The fake's cache transceiver parks KV in a shared
directory, so KV crosses the process boundary as with two real TensorRT-LLM instances.
Disaggregated output must equal aggregated output token for token.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tandem.api.v1alpha1 import PoolRole
from tandem.api.validate import load_inference_cluster
from tandem.engines.base import SamplingParams
from tandem.worker.client import WorkerClient
from tandem.worker.types import PrefillReply
from tandem_operator.contract import dump_config, render_worker_config

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FAKES = ROOT / "tests" / "fakes"
EXAMPLE = ROOT / "manifests" / "examples" / "gpt-oss-120b-gb200.yaml"
SAMPLING = SamplingParams(max_tokens=12)
PROMPT_LENGTHS = (1, 31, 32, 33, 257, 4096, 32_768)


class WorkerProcess:
    def __init__(self, proc: asyncio.subprocess.Process, port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log
        self.client = WorkerClient(f"127.0.0.1:{port}", timeout_s=30.0, decode_timeout_s=60.0)

    async def stop(self) -> None:
        await self.client.close()
        if self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 20)
            except TimeoutError:
                self.proc.kill()
        await self.proc.wait()


class Workers:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.fabric = tmp / "fabric"
        self.fabric.mkdir()
        self.started: list[WorkerProcess] = []

    async def start(self, role: PoolRole, worker_id: str) -> WorkerProcess:
        cluster = load_inference_cluster(EXAMPLE)
        config = self.tmp / f"{role.value}.json"
        config.write_text(dump_config(render_worker_config(cluster, role)))
        log = self.tmp / f"{worker_id}.log"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(FAKES), os.environ.get("PYTHONPATH", "")]),
            "TANDEM_FAKE_TRTLLM_FABRIC_DIR": str(self.fabric),
        }
        with log.open("wb") as stderr:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tandem.worker",
                f"--config={config}",
                "--engine=trtllm",
                f"--worker-id={worker_id}",
                "--port=0",
                "--rpc-timeout-s=10",
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                env=env,
            )
        assert proc.stdout is not None
        async with asyncio.timeout(60):
            while True:
                line = (await proc.stdout.readline()).decode()
                if not line:
                    raise AssertionError(f"{worker_id} exited early:\n{log.read_text()[-3000:]}")
                if line.startswith("READY "):
                    break
        worker = WorkerProcess(proc, int(line.split()[1]), log)
        self.started.append(worker)
        return worker

    async def stop(self) -> None:
        for worker in self.started:
            await worker.stop()


@pytest.fixture
async def workers(tmp_path: Path) -> AsyncIterator[Workers]:
    started = Workers(tmp_path)
    yield started
    await started.stop()


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
