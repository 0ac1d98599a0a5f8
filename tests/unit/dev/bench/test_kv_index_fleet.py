"""The index benchmark's fleet: the KV events its workers would emit, checked against
the router's real index."""

from __future__ import annotations

from tandem.kv.events import BlocksStored, KvCacheEvent
from tandem.router.kv_index import KvIndex
from tandem.worker.types import KvEventBatch
from tandem_dev.bench.kv_index import (
    BATCH_EVENTS,
    BLOCK_SIZE,
    EVENT_BLOCKS,
    FleetShape,
    address_of,
    build_fleet,
    interleave_batches,
)

# 3 workers x 2 prompts of 40 blocks, the first 4 blocks shared by every prompt.
SHAPE = FleetShape(workers=3, sequences=2, sequence_tokens=40 * 16, system_tokens=64, hit=(1, 0))


def apply(index: KvIndex, per_worker: dict[int, list[KvCacheEvent]]) -> int:
    """Applies the events as the router would receive them; returns how many the
    tree refused."""
    skipped = 0
    for worker, events in interleave_batches(per_worker):
        batch = KvEventBatch(str(worker), "i1", BLOCK_SIZE, False, 1, tuple(events))
        skipped += index.apply(address_of(worker), batch).skipped
    return skipped


Removals = dict[int, list[KvCacheEvent]]


def filled(shape: FleetShape = SHAPE) -> tuple[KvIndex, list[int], list[int], Removals]:
    fleet = build_fleet(shape)
    index = KvIndex()
    for worker in range(shape.workers):
        index.apply(address_of(worker), KvEventBatch(str(worker), "i1", BLOCK_SIZE, True, 0, ()))
    assert apply(index, fleet.events) == 0
    return index, fleet.system, fleet.cached_prompt, fleet.removals


def test_every_worker_stores_the_shared_prefix_once_and_each_prompt_after_it() -> None:
    fleet = build_fleet(SHAPE)
    for events in fleet.events.values():
        blocks = [b for e in events if isinstance(e, BlocksStored) for b in e.blocks]
        assert len(blocks) == 4 + 2 * 36 == len({b.block_hash for b in blocks})
        assert all(len(e.blocks) <= EVENT_BLOCKS for e in events if isinstance(e, BlocksStored))


def test_the_index_finds_the_cached_prompt_on_its_worker_and_the_system_prompt_everywhere() -> None:
    index, system, cached_prompt, _ = filled()
    assert index.cached_tokens(cached_prompt) == {
        address_of(0): 64,
        address_of(1): 640,
        address_of(2): 64,
    }
    fresh = system + [7] * 100
    assert index.cached_tokens(fresh) == {address_of(w): 64 for w in range(3)}


def test_evictions_remove_each_workers_last_prompt_leaves_first() -> None:
    index, _, cached_prompt, removals = filled(
        FleetShape(workers=2, sequences=2, sequence_tokens=640, system_tokens=64, hit=(1, 1))
    )
    assert index.cached_tokens(cached_prompt)[address_of(1)] == 640
    assert apply(index, removals) == 0  # every removed block was there
    assert index.cached_tokens(cached_prompt) == {address_of(0): 64, address_of(1): 64}


def test_stream_batches_interleave_workers_and_keep_each_workers_order() -> None:
    event: KvCacheEvent = BlocksStored(None, ())
    per_worker = {w: [event] * (2 * BATCH_EVENTS + 1) for w in (0, 1)}
    batches = interleave_batches(per_worker)
    assert [w for w, _ in batches] == [0, 1, 0, 1, 0, 1]
    assert [len(b) for _, b in batches] == [BATCH_EVENTS] * 4 + [1, 1]
