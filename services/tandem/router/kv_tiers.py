"""The offload tiers beside the radix tree: which host and disk blocks a worker holds.

Dynamo 1.6.1's ``RadixTree`` has no tier notion (``apply_event`` takes its tier-less
``KvCacheEvent`` JSON), so ``KvIndex`` gives it the device pool's events only, as before
tiers existed, and each worker's ``HOST`` and ``DISK`` events land here. A prompt's match
goes on past a worker's device prefix through the blocks its lower tiers hold. They are
looked up by ``block_hash``, which names a block together with its whole prefix, so no
parent links are needed: a prefix can run from the device pool into host and then disk
blocks, as leaf-first eviction leaves it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from tandem.kv.events import AllCleared, BlocksStored, KvCacheEvent, Tier


class LowerTiers:
    """One worker's host and disk blocks, rebuilt from its events (tiers hold a block
    at most once, so each block maps to one tier)."""

    def __init__(self) -> None:
        self._tier: dict[int, Tier] = {}

    def apply(self, event: KvCacheEvent) -> None:
        if isinstance(event, AllCleared):
            self._tier.clear()
        elif isinstance(event, BlocksStored):
            for block in event.blocks:
                self._tier[block.block_hash] = event.tier
        else:
            for block_hash in event.block_hashes:
                # Only if still there: a removal that arrives after the block's store in
                # the next tier down must not forget it.
                if self._tier.get(block_hash) is event.tier:
                    del self._tier[block_hash]

    def extend(self, block_hashes: Sequence[int], start: int) -> Counter[Tier]:
        """Blocks per tier of the run of ``block_hashes`` from ``start`` (the end of the
        worker's device prefix) that the lower tiers hold."""
        held: Counter[Tier] = Counter()
        for block_hash in block_hashes[start:]:
            tier = self._tier.get(block_hash)
            if tier is None:
                break
            held[tier] += 1
        return held

    def __len__(self) -> int:
        return len(self._tier)
