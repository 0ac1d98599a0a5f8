"""A worker's KV event fan-out: snapshot first, then every batch, bounded queues."""

from __future__ import annotations

import asyncio

import pytest

from tandem.kv.block_hashes import BlockName
from tandem.kv.events import AllCleared, BlocksRemoved, BlocksStored
from tandem.worker import kv_event_log
from tandem.worker.errors import WorkerBusy
from tandem.worker.kv_event_log import KvEventLog


def stored(parent: int | None, *hashes: int) -> BlocksStored:
    return BlocksStored(parent, tuple(BlockName(h, h + 100) for h in hashes))


async def test_a_new_subscriber_gets_the_state_then_the_changes() -> None:
    log = KvEventLog("w", "i1", 16)
    log.publish([stored(None, 1, 2)])
    stream = log.subscribe()
    snapshot = await anext(stream)
    assert (snapshot.snapshot, snapshot.sequence, snapshot.block_size) == (True, 0, 16)
    assert snapshot.events[0] == AllCleared()
    assert [e.blocks[0].block_hash for e in snapshot.events[1:]] == [1, 2]  # type: ignore[union-attr]
    log.publish([BlocksRemoved((2,))])
    delta = await anext(stream)
    assert (delta.snapshot, delta.sequence, delta.events) == (False, 1, (BlocksRemoved((2,)),))
    assert log.subscribers == 1
    await stream.aclose()
    assert log.subscribers == 0


async def test_a_subscriber_that_falls_behind_is_cut_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kv_event_log, "MAX_QUEUED_BATCHES", 2)
    log = KvEventLog("w", "i1", 16)
    stream = log.subscribe()
    await anext(stream)
    for n in range(3):  # one more than fits
        log.publish([stored(None, n)])
    with pytest.raises(WorkerBusy, match="fell more than 2 batches behind"):
        await anext(stream)
    fresh = log.subscribe()  # resubscribing starts from an exact snapshot
    snapshot = await anext(fresh)
    assert len(snapshot.events) == 1 + 3
    await fresh.aclose()


async def test_closing_the_log_ends_every_stream() -> None:
    log = KvEventLog("w", "i1", 16)
    stream = log.subscribe()
    await anext(stream)
    waiting = asyncio.ensure_future(anext(stream))
    log.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiting, 5)
    assert [b async for b in log.subscribe()] == []
