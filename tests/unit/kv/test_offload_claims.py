"""Claiming blocks to read them back (``OffloadStore.claim``/``read``/``settle``/
``restore``) on a host tier of a few blocks: places are kept while claimed, given back
once, and a newer copy of a claimed block wins over the claimed one."""

from __future__ import annotations

import numpy as np

from tandem.kv.block_hashes import BlockName
from tandem.kv.events import BlocksRemoved, BlocksStored
from tandem.kv.offload import OffloadSettings, OffloadStore, Tier

LAYERS = 2
POOL_SHAPE = (8, 4, 2, 1, 2)  # blocks, block size, (k, v), heads, head dim


def make_store(host_blocks: int) -> tuple[OffloadStore, np.ndarray]:
    pool = np.arange(np.prod(POOL_SHAPE), dtype=np.float32).reshape(POOL_SHAPE)
    entry = LAYERS * pool[0].nbytes
    return OffloadStore(OffloadSettings(host_bytes=host_blocks * entry), pool, LAYERS), pool


def name(block_hash: int) -> BlockName:
    return BlockName(block_hash, block_hash + 1000)


def test_a_claimed_block_is_read_back_intact_and_its_place_freed_once() -> None:
    store, pool = make_store(2)
    store.offload(name(1), None, (0, 1))
    store.offload(name(2), 1, (2, 3))
    expected = pool[[0, 1]].copy()
    pool[:] = 0  # the device pool reuses its blocks
    store.drain_events()
    (claim,) = store.claim([1, 2], limit=1)
    assert store.drain_events() == [BlocksRemoved((1,), Tier.HOST)]
    # Its place is still taken: a third block pushes the held one out, not into it.
    store.offload(name(3), None, (4, 5))
    assert store.index.where(2) is None and store.index.where(3) is Tier.HOST
    readback = store.read(claim, (6, 7))
    assert readback.damage is None and np.array_equal(pool[[6, 7]], expected)
    store.settle(readback)
    assert store.stats().onboarded == {Tier.HOST: 1}
    assert store.index.capacity(Tier.HOST) == 2 and store.index.count(Tier.HOST) == 1


def test_a_restored_claim_is_held_again_unless_a_newer_copy_came_meanwhile() -> None:
    store, _ = make_store(3)
    store.offload(name(1), None, (0, 1))
    store.offload(name(2), None, (2, 3))
    first, second = store.claim([1], 1)[0], store.claim([2], 1)[0]
    store.drain_events()
    store.restore(first)
    assert store.index.where(1) is Tier.HOST
    assert store.drain_events() == [BlocksStored(None, (name(1),), Tier.HOST)]
    store.offload(name(2), None, (4, 5))  # computed again and evicted while claimed
    store.restore(second)
    assert store.index.where(2) is Tier.HOST and store.index.count(Tier.HOST) == 2
    # Every place is accounted for: the tier takes exactly one more block.
    store.offload(name(9), None, (6, 7))
    assert store.index.count(Tier.HOST) == 3
    store.offload(name(10), None, (0, 1))
    assert store.index.count(Tier.HOST) == 3 and store.stats().dropped == {Tier.HOST: 1}
