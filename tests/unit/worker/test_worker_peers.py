"""A decode worker forgets prefill peers that left or went idle: their gRPC channel is
closed and their KV-agent metadata dropped, and a later pull simply reconnects."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from tandem.engines.base import SamplingParams
from tandem.worker.errors import WorkerCallError
from tandem.worker.types import Role

from .conftest import RunningWorker, WorkerFactory

PROMPT = [(i * 13 + 5) % 200 + 20 for i in range(40)]
SAMPLING = SamplingParams(max_tokens=3)


async def eventually(check: Callable[[], bool], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def pull(prefill: RunningWorker, decode: RunningWorker, request_id: str) -> list[int]:
    reply = await prefill.client.prefill(request_id, PROMPT, SAMPLING)
    assert reply.kv is not None
    stream = decode.client.decode(
        request_id, PROMPT, SAMPLING, remote_kv=reply.kv, first_token=reply.first_token
    )
    return [t async for c in stream for t in c.token_ids]


async def test_an_idle_peer_is_forgotten_and_a_later_pull_reconnects(
    worker: WorkerFactory,
) -> None:
    async with (
        worker(Role.PREFILL, "p") as prefill,
        worker(Role.DECODE, "d", peer_idle_s=0.3) as decode,
    ):
        first = await pull(prefill, decode, "r1")
        assert decode.service.known_peers == 1
        await eventually(lambda: decode.service.known_peers == 0)
        assert await pull(prefill, decode, "r2") == first
        assert decode.service.known_peers == 1


async def test_a_peer_that_left_is_forgotten_at_once(worker: WorkerFactory) -> None:
    async with worker(Role.DECODE, "d") as decode:
        async with worker(Role.PREFILL, "p") as prefill:
            await pull(prefill, decode, "r1")
            reply = await prefill.client.prefill("r2", PROMPT, SAMPLING)
            assert reply.kv is not None
        assert decode.service.known_peers == 1
        # The prefill worker is gone; its handle still names it.
        with pytest.raises(WorkerCallError) as failed:
            stream = decode.client.decode(
                "r2", PROMPT, SAMPLING, remote_kv=reply.kv, first_token=reply.first_token
            )
            [c async for c in stream]
        assert failed.value.grpc_status == "ABORTED"
        assert decode.service.known_peers == 0
