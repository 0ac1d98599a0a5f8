"""The worker serving an AsyncEngine: TensorRT-LLM (the fake mirroring 1.2.1) behind real
gRPC on 127.0.0.1, in-process. The same WorkerService as the reference engine; only
the engine driver differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tandem.api.validate import load_inference_cluster
from tandem.engines.base import SamplingParams
from tandem.engines.trtllm import TrtllmEngine, TrtllmEngineOptions, render_trtllm_config
from tandem.router.ports import HandoffFailure, classify_handoff_failure
from tandem.worker.client import WorkerClient
from tandem.worker.config import WorkerConfig
from tandem.worker.engine_kv import ENGINE_BACKEND, EngineManagedKv
from tandem.worker.errors import WorkerCallError
from tandem.worker.grpc_server import add_service, create_server
from tandem.worker.service import WorkerService
from tandem.worker.types import RemoteKvHandle, Role

ROOT = Path(__file__).resolve().parents[3]
FAKES = ROOT / "tests" / "fakes"
EXAMPLE = ROOT / "manifests" / "examples" / "gpt-oss-120b-gb200.yaml"
SAMPLING = SamplingParams(max_tokens=8)


@pytest.fixture(autouse=True)
def fake_trtllm(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(FAKES))
    _forget_trtllm()
    yield
    _forget_trtllm()


def _forget_trtllm() -> None:
    for name in [n for n in sys.modules if n == "tensorrt_llm" or n.startswith("tensorrt_llm.")]:
        del sys.modules[name]


@dataclass
class Worker:
    service: WorkerService
    engine: TrtllmEngine
    client: WorkerClient

    @property
    def llm(self) -> Any:
        return self.engine._llm  # the fake LLM, for its test hooks


@contextlib.asynccontextmanager
async def run_worker(role: Role, worker_id: str, **llm_overrides: Any) -> AsyncIterator[Worker]:
    cluster = load_inference_cluster(EXAMPLE)
    engine_role = "prefill" if role is Role.PREFILL else "decode"
    llm_args = {**render_trtllm_config(cluster, engine_role), **llm_overrides}
    options = {"model": "/models/gpt-oss-120b", "role": engine_role, "llm_args": llm_args}
    engine = TrtllmEngine(TrtllmEngineOptions.from_options(options))
    config = WorkerConfig(
        role=role, worker_id=worker_id, incarnation=f"{worker_id}-1", rpc_timeout_s=5.0
    )
    server, port = create_server("127.0.0.1", 0)
    address = f"127.0.0.1:{port}"
    transport = EngineManagedKv(config.worker_id, config.incarnation)
    service = WorkerService(config, engine, transport, grpc_address=address)
    add_service(server, service)
    await service.start()
    await server.start()
    client = WorkerClient(address, timeout_s=10.0, decode_timeout_s=30.0)
    try:
        yield Worker(service, engine, client)
    finally:
        await client.close()
        await server.stop(grace=None)
        await service.stop()


async def collect(
    client: WorkerClient,
    request_id: str,
    prompt: list[int],
    sampling: SamplingParams = SAMPLING,
    remote: RemoteKvHandle | None = None,
    first: int | None = None,
) -> list[int]:
    tokens: list[int] = []
    async for chunk in client.decode(
        request_id, prompt, sampling, remote_kv=remote, first_token=first
    ):
        tokens.extend(chunk.token_ids)
    return tokens


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "condition not reached before the deadline"
        await asyncio.sleep(0.01)


def prompt_of(length: int, start: int = 5) -> list[int]:
    return [(start + 7 * i) % 997 + 3 for i in range(length)]


async def test_disaggregated_output_equals_aggregated() -> None:
    async with (
        run_worker(Role.PREFILL, "prefill-0") as prefill,
        run_worker(Role.DECODE, "decode-0") as decode,
    ):
        for i, length in enumerate([1, 2, 31, 32, 33, 500]):
            prompt = prompt_of(length, start=i)
            reply = await prefill.client.prefill(f"p-{i}", prompt, SAMPLING)
            assert reply.kv is not None
            # The engine moves the KV itself: no ranges, only its opaque handle.
            assert reply.kv.ranges == ()
            assert reply.kv.opaque
            assert reply.kv.backend == ENGINE_BACKEND
            assert reply.kv.num_tokens == length
            disaggregated = await collect(
                decode.client, f"d-{i}", prompt, remote=reply.kv, first=reply.first_token
            )
            aggregated = await collect(decode.client, f"a-{i}", prompt)
            assert disaggregated == aggregated
            assert len(aggregated) == SAMPLING.max_tokens
            assert disaggregated[0] == reply.first_token


async def test_decode_releases_the_prefill_lease_once_the_kv_moved() -> None:
    async with (
        run_worker(Role.PREFILL, "prefill-0") as prefill,
        run_worker(Role.DECODE, "decode-0") as decode,
    ):
        prompt = prompt_of(40)
        reply = await prefill.client.prefill("r", prompt, SAMPLING)
        assert reply.kv is not None
        assert (await prefill.client.stats()).held_for_transfer == 1
        await collect(decode.client, "r", prompt, remote=reply.kv, first=reply.first_token)

        async def released() -> bool:
            return (await prefill.client.stats()).held_for_transfer == 0

        await eventually(released)
        # Draining the prefill worker now has nothing left to wait for.
        assert await prefill.client.drain(1.0) == 0


async def test_first_chunk_reports_kv_handoff_without_transport_bytes() -> None:
    async with (
        run_worker(Role.PREFILL, "prefill-0") as prefill,
        run_worker(Role.DECODE, "decode-0") as decode,
    ):
        prompt = prompt_of(64)
        reply = await prefill.client.prefill("r", prompt, SAMPLING)
        assert reply.kv is not None
        chunks = [
            c
            async for c in decode.client.decode(
                "r", prompt, SAMPLING, remote_kv=reply.kv, first_token=reply.first_token
            )
        ]
        head = chunks[0]
        assert head.token_ids == (reply.first_token,)
        assert head.prefilled_locally is False
        assert head.prompt_tokens == 64
        assert head.kv_bytes_transferred == 0  # moved by TensorRT-LLM, not counted here
        assert chunks[-1].finish_reason is not None
        local = [c async for c in decode.client.decode("l", prompt, SAMPLING)]
        assert local[0].prefilled_locally is True


async def test_closing_the_stream_aborts_the_engine_request() -> None:
    async with run_worker(Role.DECODE, "decode-0") as decode:
        long = SamplingParams(max_tokens=100_000)
        stream = decode.client.decode("long", prompt_of(16), long)
        received = 0
        async for chunk in stream:
            received += len(chunk.token_ids)
            if received >= 3:
                break
        await stream.aclose()  # type: ignore[attr-defined]

        async def aborted() -> bool:
            stats = await decode.client.stats()
            return stats.active_sequences == 0 and not decode.engine._running

        await eventually(aborted)
        # The worker still serves afterwards.
        assert len(await collect(decode.client, "next", prompt_of(16))) == SAMPLING.max_tokens


async def test_stats_come_from_the_engine_iteration_stats() -> None:
    async with run_worker(Role.DECODE, "decode-0") as decode:
        await collect(decode.client, "warm", prompt_of(100))

        async def reported() -> bool:
            stats = await decode.client.stats()
            return stats.kv_blocks_total > 0

        await eventually(reported)
        stats = await decode.client.stats()
        assert stats.kv_block_size == 32  # tokens_per_block rendered for TensorRT-LLM
        assert stats.kv_blocks_free <= stats.kv_blocks_total


async def test_a_bad_handle_fails_the_handoff_and_is_counted() -> None:
    async with (
        run_worker(Role.PREFILL, "prefill-0") as prefill,
        run_worker(Role.DECODE, "decode-0") as decode,
    ):
        prompt = prompt_of(20)
        reply = await prefill.client.prefill("r", prompt, SAMPLING)
        assert reply.kv is not None
        # The decode worker asks for another prompt than the one prefilled: TensorRT-LLM's
        # transceiver has no such KV, the handoff fails before the first chunk.
        with pytest.raises(WorkerCallError) as failure:
            await collect(
                decode.client,
                "r",
                prompt_of(20, start=99),
                remote=reply.kv,
                first=reply.first_token,
            )
        assert failure.value.grpc_status == "ABORTED"
        assert failure.value.remote_code == "kv_handoff_failed"
        assert classify_handoff_failure(failure.value) is HandoffFailure.FAILED
        metric = decode.service.metrics.kv_transfer_failures.labels(ENGINE_BACKEND)
        assert metric._value.get() == 1


async def test_ranges_from_a_transport_engine_are_refused() -> None:
    async with run_worker(Role.DECODE, "decode-0") as decode:
        handle = RemoteKvHandle(
            worker_id="ref-prefill",
            incarnation="1",
            grpc_address="127.0.0.1:1",
            backend="tcp",
            num_tokens=4,
            ranges=(),
            opaque=b"",
            # Same digest: the check under test is the handle's shape, not the model.
            config_digest=decode.service.config_digest,
        )
        with pytest.raises(WorkerCallError) as failure:
            await collect(decode.client, "r", [1, 2, 3, 4], remote=handle, first=7)
        assert failure.value.grpc_status == "FAILED_PRECONDITION"
        assert "same engine" in str(failure.value)


async def test_an_engine_failure_mid_request_is_reported() -> None:
    async with run_worker(Role.DECODE, "decode-0") as decode:
        decode.llm.fail_next.append("CUDA error: an illegal memory access")
        with pytest.raises(WorkerCallError) as failure:
            await collect(decode.client, "r", prompt_of(8))
        assert "illegal memory access" in str(failure.value)
        assert len(await collect(decode.client, "ok", prompt_of(8))) == SAMPLING.max_tokens


async def test_a_prefill_cancelled_by_its_caller_is_aborted() -> None:
    async with run_worker(Role.PREFILL, "prefill-0") as prefill:
        # Hold the fake executor so that the context-only request is still running when
        # the caller goes away.
        gate = asyncio.Event()
        llm = prefill.llm
        serve, submit = llm._serve, llm.generate_async
        submitted: list[Any] = []

        async def held(*args: Any) -> None:
            await gate.wait()
            await serve(*args)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            submitted.append(submit(*args, **kwargs))
            return submitted[-1]

        llm._serve, llm.generate_async = held, recorded
        call = asyncio.create_task(prefill.client.prefill("r", prompt_of(300), SAMPLING))

        async def running() -> bool:
            return bool(prefill.engine._running)

        await eventually(running)
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call

        async def aborted() -> bool:
            return not prefill.engine._running and submitted[0].aborted

        await eventually(aborted)
        gate.set()
        reply = await prefill.client.prefill("next", prompt_of(30), SAMPLING)
        assert reply.kv is not None
