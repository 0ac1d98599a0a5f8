"""Where offloaded KV blocks live, and the moves that keep each tier within its budget.

Pure bookkeeping over block hashes (no bytes); ``store`` carries the moves out. Tiers are
exclusive: a block lives in at most one of them, and leaves it when it is onboarded back
into the device pool; while its bytes are read back it is *claimed*: in no tier, but its
place still counted against its tier's capacity. A block the device pool evicts enters
the highest enabled tier; a full tier passes its least recently entered block one tier
down, and the lowest one drops it. A disabled tier (capacity 0: its disk failed) is
skipped.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tandem.kv.events import LOWER_TIERS, Tier

TIERS = LOWER_TIERS  # the offload tiers, highest (fastest) first


@dataclass(frozen=True, slots=True)
class Move:
    """``block_hash`` goes from ``source`` (None: the device pool) to ``target`` (None:
    dropped)."""

    block_hash: int
    source: Tier | None
    target: Tier | None


class TierIndex:
    """Which tier holds which block, oldest entry first per tier, and each tier's
    capacity in blocks."""

    def __init__(self, capacity: Mapping[Tier, int]) -> None:
        self._capacity = {tier: capacity.get(tier, 0) for tier in TIERS}
        self._blocks: dict[Tier, OrderedDict[int, None]] = {t: OrderedDict() for t in TIERS}
        self._tier_of: dict[int, Tier] = {}
        self._claimed: Counter[Tier] = Counter()

    def where(self, block_hash: int) -> Tier | None:
        return self._tier_of.get(block_hash)

    def capacity(self, tier: Tier) -> int:
        """Blocks ``tier`` may hold now: its capacity less the places claimed blocks keep."""
        return max(0, self._capacity[tier] - self._claimed[tier])

    def count(self, tier: Tier) -> int:
        return len(self._blocks[tier])

    def oldest(self, tier: Tier, skip: int) -> int:
        """The block that entered ``tier`` first, other than ``skip``."""
        return next(h for h in self._blocks[tier] if h != skip)

    def enabled(self) -> list[Tier]:
        return [tier for tier in TIERS if self.capacity(tier) > 0]

    def apply(self, move: Move) -> None:
        if move.source is not None:
            del self._blocks[move.source][move.block_hash]
            del self._tier_of[move.block_hash]
        if move.target is not None:
            self._blocks[move.target][move.block_hash] = None
            self._tier_of[move.block_hash] = move.target

    def claim(self, block_hash: int) -> Tier:
        """Take ``block_hash`` out of its tier to be read back: nothing moves or drops it
        any more, and its place counts against the tier until ``settle`` or ``restore``."""
        tier = self._tier_of[block_hash]
        self.apply(Move(block_hash, tier, None))
        self._claimed[tier] += 1
        return tier

    def settle(self, tier: Tier) -> None:
        """A claimed block of ``tier`` has left it: its place is free."""
        assert self._claimed[tier] > 0, f"no claimed block in the {tier} tier"
        self._claimed[tier] -= 1

    def restore(self, block_hash: int, tier: Tier) -> None:
        """A claimed block goes back into its place in ``tier`` (it was not read)."""
        self.settle(tier)
        self.apply(Move(block_hash, None, tier))

    def disable(self, tier: Tier) -> list[Move]:
        """Take ``tier`` out of service: capacity 0, and the moves dropping what it held
        (already applied)."""
        self._capacity[tier] = 0
        drops = [Move(h, tier, None) for h in self._blocks[tier]]
        for move in drops:
            self.apply(move)
        return drops


def plan_offload(index: TierIndex, block_hash: int) -> list[Move]:
    """The moves that take ``block_hash`` from the device pool into the highest enabled
    tier, in the order to carry them out: lowest tier first, so that each move finds
    room. A stale copy of the block (onboarding recomputed it instead) is dropped first.
    With no tier enabled the block is simply not kept."""
    moves: list[Move] = []
    old = index.where(block_hash)
    if old is not None:
        moves.append(Move(block_hash, old, None))
    enabled = index.enabled()
    cascade: list[Move] = []
    incoming, source = block_hash, None
    for position, tier in enumerate(enabled):
        cascade.append(Move(incoming, source, tier))
        held = index.count(tier) - (1 if old is tier else 0) + 1
        if held <= index.capacity(tier):
            break
        victim = index.oldest(tier, skip=block_hash)
        below = enabled[position + 1] if position + 1 < len(enabled) else None
        if below is None:
            cascade.append(Move(victim, tier, None))
            break
        incoming, source = victim, tier
    return moves + cascade[::-1]


def plan_onboarding(index: TierIndex, hashes: Sequence[int], limit: int) -> list[Move]:
    """The blocks of ``hashes`` (a prompt's blocks after its device-cached prefix) that
    come back from the tiers: the leading run some tier holds, at most ``limit``."""
    moves = []
    for block_hash in hashes[:limit]:
        tier = index.where(block_hash)
        if tier is None:
            break
        moves.append(Move(block_hash, tier, None))
    return moves
