"""Workers in-process behind real gRPC on 127.0.0.1, the reference engine, TCP KV."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Awaitable, Callable

import numpy as np
import pytest

from tandem.engines.base import FinishReason, SamplingParams, StepOutput
from tandem.engines.reference import compute_kv_bytes
from tandem.engines.reference.config import ReferenceModelConfig
from tandem.worker.admission import AdmissionLimits
from tandem.worker.client import WorkerClient
from tandem.worker.errors import WorkerCallError
from tandem.worker.types import HealthStatus, RemoteKvHandle, Role

from .conftest import TINY_ENGINE, RunningWorker, WorkerFactory

GREEDY = SamplingParams(max_tokens=6)


class StepGate:
    """Holds the worker's decode steps (engine steps with a decoding sequence) until
    opened, so a test can look at a running sequence that cannot finish on its own
    (whatever tokens the model picks); prefill-only steps still run."""

    def __init__(self, worker: RunningWorker) -> None:
        self._opened = threading.Event()
        engine = worker.service._engine
        step = engine.step

        def gated(batch: dict[str, SamplingParams]) -> list[StepOutput]:
            if batch:
                self._opened.wait(timeout=30)
            return step(batch)

        engine.step = gated  # type: ignore[method-assign]

    def open(self) -> None:
        self._opened.set()


def slow_release(worker: RunningWorker, delay_s: float = 0.3) -> None:
    """The worker's engine takes ``delay_s`` to free a sequence (a busy engine thread)."""
    engine = worker.service._engine
    release = engine.release

    def slow(request_id: str) -> None:
        time.sleep(delay_s)
        release(request_id)

    engine.release = slow  # type: ignore[method-assign]


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "condition not reached before the deadline"
        await asyncio.sleep(0.01)


def prompt_of(length: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(0, 256, length).tolist()


async def collect(
    client: WorkerClient,
    request_id: str,
    prompt: list[int],
    sampling: SamplingParams = GREEDY,
    remote_kv: RemoteKvHandle | None = None,
    first_token: int | None = None,
) -> list[int]:
    tokens: list[int] = []
    stream = client.decode(
        request_id, prompt, sampling, remote_kv=remote_kv, first_token=first_token
    )
    async for chunk in stream:
        tokens.extend(chunk.token_ids)
    return tokens


async def test_disaggregated_decode_equals_local_decode(worker: WorkerFactory) -> None:
    async with (
        worker(Role.PREFILL, "prefill-0") as prefill,
        worker(Role.DECODE, "decode-0") as decode,
        worker(Role.BOTH, "both-0") as both,
    ):
        for i, length in enumerate([1, 15, 16, 17, 129, 300]):
            prompt = prompt_of(length, seed=i)
            reply = await prefill.client.prefill(f"r{i}", prompt, GREEDY)
            assert reply.kv is not None
            config = ReferenceModelConfig.from_options(TINY_ENGINE)
            assert reply.kv.nbytes == compute_kv_bytes(config, length)

            chunks = [
                c
                async for c in decode.client.decode(
                    f"r{i}", prompt, GREEDY, remote_kv=reply.kv, first_token=reply.first_token
                )
            ]
            remote_tokens = [t for c in chunks for t in c.token_ids]
            local_tokens = await collect(both.client, f"r{i}", prompt)

            assert remote_tokens == local_tokens
            assert remote_tokens[0] == reply.first_token
            assert chunks[0].kv_bytes_transferred == reply.kv.nbytes
            assert not chunks[0].prefilled_locally
            assert chunks[-1].finish_reason is not None
        # The decode worker released every pulled sequence on the prefill side.
        await eventually(lambda: _held(prefill.client, 0))


async def _held(client: WorkerClient, expected: int) -> bool:
    return (await client.stats()).held_for_transfer == expected


async def test_seeded_sampling_is_identical_across_the_handoff(worker: WorkerFactory) -> None:
    sampling = SamplingParams(max_tokens=8, temperature=0.9, top_p=0.95, seed=1234)
    async with worker(Role.PREFILL, "p") as prefill, worker(Role.BOTH, "b") as both:
        prompt = prompt_of(40, seed=9)
        reply = await prefill.client.prefill("s1", prompt, sampling)
        assert reply.kv is not None
        remote = await collect(
            both.client,
            "s1",
            prompt,
            sampling=sampling,
            remote_kv=reply.kv,
            first_token=reply.first_token,
        )
        local = await collect(both.client, "s1", prompt, sampling=sampling)
        assert remote == local


async def test_both_worker_hands_off_to_itself_without_copying(worker: WorkerFactory) -> None:
    async with worker(Role.BOTH, "b") as both:
        prompt = prompt_of(50)
        reply = await both.client.prefill("self", prompt, GREEDY)
        assert reply.kv is not None and reply.kv.worker_id == "b"
        chunks = [
            c
            async for c in both.client.decode(
                "self", prompt, GREEDY, remote_kv=reply.kv, first_token=reply.first_token
            )
        ]
        assert chunks[0].kv_bytes_transferred == 0
        assert [t for c in chunks for t in c.token_ids] == await collect(both.client, "x", prompt)
        stats = await both.client.stats()
        assert stats.held_for_transfer == 0


async def test_first_token_that_ends_the_sequence_frees_the_kv(worker: WorkerFactory) -> None:
    async with worker(Role.PREFILL, "p") as prefill:
        reply = await prefill.client.prefill("one", prompt_of(20), SamplingParams(max_tokens=1))
        assert reply.finish_reason is FinishReason.LENGTH
        assert reply.kv is None
        stats = await prefill.client.stats()
        assert stats.held_for_transfer == 0
        await eventually(lambda: _all_blocks_free(prefill.client))


async def _all_blocks_free(client: WorkerClient) -> bool:
    stats = await client.stats()
    return stats.kv_blocks_free == stats.kv_blocks_total


async def test_client_leaving_mid_stream_frees_the_kv(worker: WorkerFactory) -> None:
    async with worker(Role.BOTH, "b") as both:
        gate = StepGate(both)  # the sequence cannot finish on its own while we look
        stream = both.client.decode("gone", prompt_of(200), SamplingParams(max_tokens=10_000))
        first = await anext(stream)
        assert first.token_ids and first.finish_reason is None
        assert (await both.client.stats()).active_sequences == 1
        await stream.aclose()  # type: ignore[attr-defined]
        await eventually(lambda: _active(both.client, 0))
        gate.open()
        await eventually(lambda: _all_blocks_free(both.client))


async def test_release_then_lease_expiry(worker: WorkerFactory) -> None:
    async with worker(Role.PREFILL, "p", lease_s=0.3) as prefill:
        await prefill.client.prefill("a", prompt_of(64), GREEDY)
        assert await prefill.client.release("a") is True
        assert await prefill.client.release("a") is False

        reply = await prefill.client.prefill("b", prompt_of(64), GREEDY)
        assert reply.kv is not None
        assert (await prefill.client.stats()).held_for_transfer == 1
        await eventually(lambda: _held(prefill.client, 0))  # nobody pulled: lease expired
        await eventually(lambda: _all_blocks_free(prefill.client))
        assert await prefill.client.release("b") is False


async def test_wrong_role_and_bad_requests_are_refused(worker: WorkerFactory) -> None:
    async with worker(Role.DECODE, "d") as decode:
        with pytest.raises(WorkerCallError) as info:
            await decode.client.prefill("x", [1, 2, 3], GREEDY)
        assert info.value.grpc_status == "FAILED_PRECONDITION"
        with pytest.raises(WorkerCallError) as info:
            await collect(decode.client, "x", [])
        assert info.value.grpc_status == "INVALID_ARGUMENT"
        with pytest.raises(WorkerCallError) as info:
            await collect(decode.client, "x", [100_000])
        assert info.value.grpc_status == "INVALID_ARGUMENT"


async def test_admission_limits_answer_resource_exhausted(worker: WorkerFactory) -> None:
    async with worker(Role.BOTH, "b", limits=AdmissionLimits(max_active_sequences=1)) as both:
        gate = StepGate(both)
        stream = both.client.decode("long", prompt_of(10), SamplingParams(max_tokens=10_000))
        await anext(stream)
        with pytest.raises(WorkerCallError) as info:
            await collect(both.client, "second", prompt_of(10))
        assert info.value.grpc_status == "RESOURCE_EXHAUSTED"
        await stream.aclose()  # type: ignore[attr-defined]
        gate.open()
        await eventually(lambda: _active(both.client, 0))
        assert await collect(both.client, "third", prompt_of(10))  # admitted again
    async with worker(Role.PREFILL, "p", limits=AdmissionLimits(max_queued_requests=0)) as p:
        with pytest.raises(WorkerCallError) as info:
            await p.client.prefill("x", prompt_of(10), GREEDY)
        assert info.value.grpc_status == "RESOURCE_EXHAUSTED"


async def _active(client: WorkerClient, expected: int) -> bool:
    return (await client.stats()).active_sequences == expected


async def test_kv_pool_exhaustion_answers_resource_exhausted(worker: WorkerFactory) -> None:
    async with worker(Role.PREFILL, "p", engine={"num_kv_blocks": 8}) as prefill:
        with pytest.raises(WorkerCallError) as info:
            await prefill.client.prefill("big", prompt_of(500), GREEDY)
        assert info.value.grpc_status == "RESOURCE_EXHAUSTED"


async def test_stale_incarnation_is_refused_cleanly(worker: WorkerFactory) -> None:
    async with worker(Role.PREFILL, "p") as prefill, worker(Role.DECODE, "d") as decode:
        prompt = prompt_of(30)
        reply = await prefill.client.prefill("r", prompt, GREEDY)
        assert reply.kv is not None
        stale = dataclasses.replace(reply.kv, incarnation="an-older-process")
        with pytest.raises(WorkerCallError) as info:
            await collect(decode.client, "r", prompt, remote_kv=stale, first_token=1)
        assert info.value.grpc_status == "ABORTED"
        assert "restarted" in info.value.message
        await eventually(lambda: _all_blocks_free(decode.client))


async def test_drain_refuses_new_work_and_waits_for_running(worker: WorkerFactory) -> None:
    async with worker(Role.BOTH, "b") as both:
        await both.client.prefill("held", prompt_of(20), GREEDY)  # KV waiting to be pulled
        gate = StepGate(both)  # (it holds the engine thread once a step is due)
        stream = both.client.decode("run", prompt_of(10), SamplingParams(max_tokens=10_000))
        await anext(stream)
        drain = asyncio.create_task(both.client.drain(10.0))
        await eventually(lambda: _status(both.client, HealthStatus.DRAINING))
        with pytest.raises(WorkerCallError) as info:
            await both.client.prefill("new", [1, 2], GREEDY)
        assert info.value.grpc_status == "UNAVAILABLE"
        await stream.aclose()  # type: ignore[attr-defined]
        gate.open()
        await eventually(lambda: _active(both.client, 0))
        assert not drain.done()  # still holding KV for a decode worker
        assert await both.client.release("held") is True
        assert await drain == 0


async def _status(client: WorkerClient, expected: HealthStatus) -> bool:
    return (await client.health()).status is expected


async def test_drain_gives_up_after_its_grace(worker: WorkerFactory) -> None:
    async with worker(Role.PREFILL, "p") as prefill:
        await prefill.client.prefill("held", prompt_of(20), GREEDY)
        assert await prefill.client.drain(0.2) == 1


async def test_kv_whose_lease_ran_out_before_the_claim_is_never_read(
    worker: WorkerFactory,
) -> None:
    # Nobody claimed the KV within its lease: the prefill side freed the blocks (and may
    # have reused them), so the claim is refused and nothing is read.
    async with worker(Role.PREFILL, "p", lease_s=0.3) as prefill, worker(Role.DECODE, "d") as d:
        slow_release(d)
        prompt = prompt_of(30)
        reply = await prefill.client.prefill("late", prompt, GREEDY)
        assert reply.kv is not None
        await eventually(lambda: _held(prefill.client, 0))
        with pytest.raises(WorkerCallError) as info:
            await collect(d.client, "late", prompt, remote_kv=reply.kv, first_token=1)
        assert info.value.grpc_status == "ABORTED"
        assert "lease ran out" in info.value.message
        # The blocks reserved for the pull are free by the time the failure is heard,
        # however slow the engine thread is to release them.
        assert await _all_blocks_free(d.client)
    registry = prefill.service.metrics.registry
    assert registry.get_sample_value("tandem_worker_kv_claims_total", {"outcome": "gone"}) == 1


async def test_prefix_cache_hits_are_counted(worker: WorkerFactory) -> None:
    """Concurrent local requests sharing a 96-token prefix: the first computes it, the
    ones after reuse it, and every answer equals that request alone on a fresh worker."""
    system = prompt_of(96, seed=7)
    prompts = [system + prompt_of(5 + i, seed=10 + i) for i in range(3)]
    async with worker(Role.BOTH, "cached") as both:
        first = await collect(both.client, "warm", prompts[0])
        rest = await asyncio.gather(
            *(collect(both.client, f"r{i}", p) for i, p in enumerate(prompts[1:]))
        )
        registry = both.service.metrics.registry
        cached = registry.get_sample_value("tandem_worker_prompt_tokens_total", {"source": "cache"})
        computed = registry.get_sample_value(
            "tandem_worker_prompt_tokens_total", {"source": "computed"}
        )
    assert cached == 2 * 96
    assert computed == sum(len(p) for p in prompts) - 2 * 96
    for index, prompt in enumerate(prompts):
        async with worker(Role.BOTH, f"alone-{index}") as alone:
            assert await collect(alone.client, "a", prompt) == [first, *rest][index]
