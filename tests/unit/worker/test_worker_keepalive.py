"""A worker that goes silent without closing its connections (its node lost, a partition)
is noticed by gRPC keepalive: an open call fails UNAVAILABLE within the keepalive time
plus its timeout instead of waiting for its deadline (the KV event stream has none).
And the worker's server accepts those pings: a quiet stream outlives several of them.

The client here pings five times as often as the production one, against the production
server: a server's ping policy only ever refuses pings for coming too often, so one that
takes these takes the production client's, and the test takes seconds, not a minute."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from tandem.engines.base import SamplingParams
from tandem.worker.client import KEEPALIVE_TIME_MS, KEEPALIVE_TIMEOUT_MS, WorkerClient
from tandem.worker.errors import WorkerCallError
from tandem.worker.types import Role

from .conftest import WorkerFactory

TEST_KEEPALIVE_TIME_MS = KEEPALIVE_TIME_MS // 5
TEST_KEEPALIVE_TIMEOUT_MS = KEEPALIVE_TIMEOUT_MS // 5
KEEPALIVE_S = TEST_KEEPALIVE_TIME_MS / 1000
NOTICE_S = (TEST_KEEPALIVE_TIME_MS + TEST_KEEPALIVE_TIMEOUT_MS) / 1000
PROMPT = [(i * 7 + 3) % 200 + 20 for i in range(40)]


class FreezableProxy:
    """A TCP proxy on 127.0.0.1 that can go silent: once frozen it forwards nothing either
    way and keeps every connection open, as a peer behind a dead link would."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self._upstream = (host, int(port))
        self._frozen = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []
        self.address = ""

    def freeze(self) -> None:
        self._frozen.set()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            if self._frozen.is_set():
                await asyncio.Event().wait()  # swallow it and hold the connection open
            writer.write(data)
            await writer.drain()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        self._writers += [writer, up_writer]
        for pump in (self._pump(reader, up_writer), self._pump(up_reader, writer)):
            task = asyncio.create_task(pump)
            self._tasks.add(task)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[FreezableProxy]:
        server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        try:
            yield self
        finally:
            server.close()
            for task in self._tasks:
                task.cancel()
            for writer in self._writers:
                writer.close()


async def test_a_silent_worker_ends_an_open_stream_within_the_keepalive(
    worker: WorkerFactory,
) -> None:
    async with (
        worker(Role.BOTH, "w1") as both,
        FreezableProxy(both.address).running() as proxy,
        WorkerClient(
            proxy.address,
            keepalive_time_ms=TEST_KEEPALIVE_TIME_MS,
            keepalive_timeout_ms=TEST_KEEPALIVE_TIMEOUT_MS,
        ) as client,
    ):
        events = client.kv_events()
        assert (await anext(events)).snapshot

        # Quiet for three pings: the server accepts them and the stream stays open.
        await asyncio.sleep(3 * KEEPALIVE_S + 1)
        await both.client.prefill("r1", PROMPT, SamplingParams(max_tokens=2))
        assert not (await asyncio.wait_for(anext(events), 10)).snapshot

        proxy.freeze()
        frozen_at = asyncio.get_running_loop().time()
        with pytest.raises(WorkerCallError) as ended:
            # Without keepalive this waits forever: the stream has no deadline.
            await asyncio.wait_for(anext(events), 3 * NOTICE_S)
        assert ended.value.grpc_status == "UNAVAILABLE"
        noticed_s = asyncio.get_running_loop().time() - frozen_at
        # It was an unanswered ping that noticed, not a reset (that would be at once). A
        # ping sent just before the freeze, its answer swallowed, started its timeout up
        # to one round trip before frozen_at: hence half the timeout, not all of it.
        assert noticed_s >= TEST_KEEPALIVE_TIMEOUT_MS / 1000 / 2
