"""The router's KV index on Dynamo's RadixTree: snapshots, deltas, removal, lookups."""

from __future__ import annotations

import pytest

from tandem.kv.block_hashes import compute_block_names
from tandem.kv.events import AllCleared, BlocksRemoved, BlocksStored, KvCacheEvent
from tandem.router.kv_index import KvIndex, StaleBatchError
from tandem.worker.types import KvEventBatch

PROMPT = [(i * 31 + 7) % 5000 for i in range(100)]  # 6 full blocks of 16


def stored(tokens: list[int], block_size: int = 16) -> BlocksStored:
    return BlocksStored(None, tuple(compute_block_names(tokens, block_size)))


def batch(
    *events: KvCacheEvent, snapshot: bool = False, incarnation: str = "i1", block_size: int = 16
) -> KvEventBatch:
    head: tuple[KvCacheEvent, ...] = (AllCleared(),) if snapshot else ()
    return KvEventBatch("w", incarnation, block_size, snapshot, 0, head + events)


def test_cached_tokens_follow_stored_and_removed_blocks() -> None:
    index = KvIndex()
    index.apply("a:1", batch(stored(PROMPT[:64]), snapshot=True))
    index.apply("b:1", batch(stored(PROMPT[:32]), snapshot=True))
    assert index.cached_tokens(PROMPT) == {"a:1": 64, "b:1": 32}
    third = compute_block_names(PROMPT[:48], 16)[2].block_hash
    index.apply("a:1", batch(BlocksRemoved((third,))))
    assert index.cached_tokens(PROMPT) == {"a:1": 32, "b:1": 32}
    assert index.cached_tokens(PROMPT[:15]) == {}  # no full block: nothing to look up
    assert index.cached_tokens([9] * 64) == {}


def test_a_snapshot_replaces_what_a_worker_had() -> None:
    index = KvIndex()
    index.apply("a:1", batch(stored(PROMPT[:64]), snapshot=True))
    index.apply("a:1", batch(stored(PROMPT[:16]), snapshot=True, incarnation="i2"))
    assert index.cached_tokens(PROMPT) == {"a:1": 16}


def test_removal_and_restarts() -> None:
    index = KvIndex()
    index.apply("a:1", batch(stored(PROMPT), snapshot=True))
    # The health poll saw incarnation i1 restart as i2: i1's entries go...
    assert index.remove("a:1", unless_incarnation="i2") is True
    assert index.cached_tokens(PROMPT) == {}
    # ...but a snapshot from i2 that arrived first is kept.
    index.apply("a:1", batch(stored(PROMPT), snapshot=True, incarnation="i2"))
    assert index.remove("a:1", unless_incarnation="i2") is False
    assert index.cached_tokens(PROMPT) == {"a:1": 96}
    assert index.remove("a:1") is True and index.remove("a:1") is False
    assert list(index.known()) == []


def test_deltas_without_a_snapshot_are_refused() -> None:
    index = KvIndex()
    with pytest.raises(StaleBatchError):
        index.apply("a:1", batch(stored(PROMPT)))
    index.apply("a:1", batch(snapshot=True))
    with pytest.raises(StaleBatchError):
        index.apply("a:1", batch(stored(PROMPT), incarnation="i9"))


def test_events_the_tree_cannot_place_are_counted_not_fatal() -> None:
    index = KvIndex()
    orphan = BlocksStored(12345, tuple(compute_block_names(PROMPT[:16], 16)))
    applied = index.apply("a:1", batch(orphan, BlocksRemoved((777,)), snapshot=True))
    assert (applied.events, applied.skipped) == (3, 2)
    assert index.cached_tokens(PROMPT) == {}


def test_workers_with_other_block_sizes_are_looked_up_with_their_own() -> None:
    index = KvIndex()
    index.apply("a:1", batch(stored(PROMPT[:64], 32), snapshot=True, block_size=32))
    index.apply("b:1", batch(stored(PROMPT[:48], 16), snapshot=True))
    assert index.cached_tokens(PROMPT) == {"a:1": 64, "b:1": 48}
