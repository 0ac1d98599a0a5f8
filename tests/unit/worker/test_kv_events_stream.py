"""A worker's KV events over real gRPC: what its engine's prefix cache reports reaches
every subscriber, a late subscriber starts from an exact snapshot, and streams end with
the worker."""

from __future__ import annotations

import asyncio

from tandem.engines.base import SamplingParams
from tandem.kv.block_hashes import compute_block_names
from tandem.kv.events import AllCleared, BlocksStored
from tandem.worker.client import WorkerClient
from tandem.worker.errors import WorkerCallError
from tandem.worker.types import KvEventBatch, Role

from .conftest import WorkerFactory

PROMPT = [(i * 11 + 5) % 200 + 20 for i in range(70)]  # 4 full blocks of 16


async def test_engine_events_reach_subscribers_and_late_ones_get_a_snapshot(
    worker: WorkerFactory,
) -> None:
    subscriber: WorkerClient | None = None
    async with worker(Role.BOTH, "w1") as both:
        subscriber = WorkerClient(both.address)
        first = subscriber.kv_events()
        snapshot = await anext(first)
        assert snapshot.snapshot and snapshot.events == (AllCleared(),)
        assert (snapshot.worker_id, snapshot.block_size) == ("w1", 16)

        # One prefill-only step (up to prefill_chunk = 256 tokens): its 4 full blocks.
        await both.client.prefill("r1", PROMPT, SamplingParams(max_tokens=4))
        delta = await asyncio.wait_for(anext(first), 10)
        expected = tuple(compute_block_names(PROMPT, 16))
        assert delta.events == (BlocksStored(None, expected),)
        assert not delta.snapshot and delta.sequence == 1

        late = subscriber.kv_events()
        state = await anext(late)
        assert state.snapshot
        assert [b for e in state.events[1:] for b in e.blocks] == list(expected)  # type: ignore[union-attr]
        pending: list[asyncio.Future[KvEventBatch]] = [
            asyncio.ensure_future(anext(first)),
            asyncio.ensure_future(anext(late)),
        ]
    # The worker stopped: both streams end (cleanly, or as a failed call).
    try:
        for future in pending:
            done = await asyncio.wait_for(asyncio.gather(future, return_exceptions=True), 10)
            assert isinstance(done[0], StopAsyncIteration | WorkerCallError), done
    finally:
        await subscriber.close()
