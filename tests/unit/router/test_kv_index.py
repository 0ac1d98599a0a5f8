"""The router's KV index on Dynamo's RadixTree: snapshots, deltas, removal, lookups."""

from __future__ import annotations

import pytest

from tandem.kv.block_hashes import compute_block_names
from tandem.kv.events import AllCleared, BlocksRemoved, BlocksStored, KvCacheEvent, Tier
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


def offloaded(tokens: list[int], first: int, tier: Tier) -> list[KvCacheEvent]:
    """The events of the blocks of ``tokens`` from ``first`` on leaving the device pool
    for ``tier``, as ``OffloadStore`` reports them: removed there, stored here."""
    names = compute_block_names(tokens, 16)
    moved = names[first:]
    events: list[KvCacheEvent] = [BlocksRemoved(tuple(n.block_hash for n in moved))]
    for i, name in enumerate(moved, start=first):
        parent = names[i - 1].block_hash if i else None
        events.append(BlocksStored(parent, (name,), tier))
    return events


def test_lookups_follow_a_prefix_from_the_device_into_the_tiers() -> None:
    names = compute_block_names(PROMPT, 16)
    index = KvIndex()
    index.apply("a:1", batch(stored(PROMPT), snapshot=True))
    index.apply("a:1", batch(*offloaded(PROMPT, 4, Tier.HOST)))
    assert index.cached_by_tier(PROMPT) == {"a:1": {Tier.DEVICE: 64, Tier.HOST: 32}}
    assert index.cached_tokens(PROMPT) == {"a:1": 64}  # the tree: the device pool alone
    # The last block goes on down to disk: removed from host after stored on disk, so
    # the order of the two does not matter.
    index.apply("a:1", batch(BlocksStored(names[4].block_hash, (names[5],), Tier.DISK)))
    index.apply("a:1", batch(BlocksRemoved((names[5].block_hash,), Tier.HOST)))
    held = {Tier.DEVICE: 64, Tier.HOST: 16, Tier.DISK: 16}
    assert index.cached_by_tier(PROMPT) == {"a:1": held}
    # Onboarding the fifth block: out of host, back on device.
    index.apply("a:1", batch(BlocksRemoved((names[4].block_hash,), Tier.HOST)))
    index.apply("a:1", batch(BlocksStored(names[3].block_hash, (names[4],))))
    assert index.cached_by_tier(PROMPT) == {"a:1": {Tier.DEVICE: 80, Tier.DISK: 16}}


def test_a_worker_holding_a_prompt_only_in_its_tiers_is_found() -> None:
    index = KvIndex()
    index.apply("a:1", batch(*offloaded(PROMPT, 0, Tier.DISK)[1:], snapshot=True))
    assert index.cached_by_tier(PROMPT) == {"a:1": {Tier.DISK: 96}}
    assert index.cached_tokens(PROMPT) == {}


def test_a_gap_in_the_tiers_ends_the_match() -> None:
    index = KvIndex()
    index.apply("a:1", batch(stored(PROMPT[:32]), snapshot=True))
    names = compute_block_names(PROMPT, 16)
    index.apply("a:1", batch(BlocksStored(names[2].block_hash, (names[3],), Tier.HOST)))
    assert index.cached_by_tier(PROMPT) == {"a:1": {Tier.DEVICE: 32}}  # block 2 is missing


def test_snapshots_and_removal_forget_the_tiers_too() -> None:
    index = KvIndex()
    index.apply("a:1", batch(*offloaded(PROMPT, 0, Tier.HOST)[1:], snapshot=True))
    index.apply("a:1", batch(AllCleared()))
    assert index.cached_by_tier(PROMPT) == {}
    index.apply("a:1", batch(*offloaded(PROMPT, 0, Tier.HOST)[1:], snapshot=True))
    index.apply("a:1", batch(stored(PROMPT[:16]), snapshot=True, incarnation="i2"))
    assert index.cached_by_tier(PROMPT) == {"a:1": {Tier.DEVICE: 16}}
    index.apply("a:1", batch(*offloaded(PROMPT, 0, Tier.HOST)[1:], snapshot=True))
    assert index.remove("a:1")
    assert index.cached_by_tier(PROMPT) == {}
