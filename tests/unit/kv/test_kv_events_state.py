"""The mirror of an engine's cached blocks that snapshots are made from."""

from __future__ import annotations

from tandem.kv.block_hashes import BlockName
from tandem.kv.events import (
    AllCleared,
    BlocksRemoved,
    BlocksStored,
    KvCacheState,
    Tier,
    count_blocks,
)


def b(n: int) -> BlockName:
    return BlockName(n, 1000 + n)


def flatten(stored: list[BlocksStored]) -> list[tuple[int | None, int]]:
    return [(s.parent_hash, blk.block_hash) for s in stored for blk in s.blocks]


def test_snapshot_lists_parents_before_children() -> None:
    state = KvCacheState()
    state.apply(BlocksStored(None, (b(1), b(2), b(3))))
    state.apply(BlocksStored(2, (b(4),)))  # a branch after block 2
    state.apply(BlocksStored(None, (b(9),)))
    order = flatten(state.snapshot())
    assert sorted(order, key=lambda x: x[1]) == [(None, 1), (1, 2), (2, 3), (2, 4), (None, 9)]
    seen: set[int] = set()
    for parent, block in order:
        assert parent is None or parent in seen
        seen.add(block)


def test_removed_parents_hide_their_descendants_and_come_back_with_them() -> None:
    state = KvCacheState()
    state.apply(BlocksStored(None, (b(1), b(2), b(3))))
    state.apply(BlocksRemoved((1,)))
    assert flatten(state.snapshot()) == []  # 2 and 3 can no longer be matched
    assert len(state) == 2
    state.apply(BlocksStored(None, (b(1),)))  # recomputed later: the chain is whole again
    assert sorted(blk for _, blk in flatten(state.snapshot())) == [1, 2, 3]


def test_tiers_are_separate_sets_and_the_snapshot_keeps_each_blocks_tier() -> None:
    state = KvCacheState()
    state.apply(BlocksStored(None, (b(1), b(2), b(3))))
    # Block 3 offloaded to host, then on to disk; block 2 to host.
    state.apply(BlocksRemoved((3,)))
    state.apply(BlocksStored(2, (b(3),), Tier.HOST))
    state.apply(BlocksStored(2, (b(3),), Tier.DISK))
    state.apply(BlocksRemoved((3,), Tier.HOST))
    state.apply(BlocksRemoved((2,)))
    state.apply(BlocksStored(1, (b(2),), Tier.HOST))
    assert state.snapshot() == [
        BlocksStored(None, (b(1),)),
        BlocksStored(1, (b(2),), Tier.HOST),
        BlocksStored(2, (b(3),), Tier.DISK),  # kept although its parent is off the device
    ]
    assert len(state) == 3 and list(state) == [1]  # iteration: the device pool's


def test_cleared_forgets_everything() -> None:
    state = KvCacheState()
    state.apply(BlocksStored(None, (b(7),), Tier.DISK))
    events = [BlocksStored(None, (b(1), b(2))), BlocksRemoved((2,))]
    for event in events:
        state.apply(event)
    assert count_blocks(events) == 3
    state.apply(AllCleared())
    assert len(state) == 0 and state.snapshot() == []
