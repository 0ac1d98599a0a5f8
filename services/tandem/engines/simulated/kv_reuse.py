"""The simulated engine's KV reuse, pure bookkeeping over block names (no bytes, no
clock): a prefix cache in the device pool and, with offload, host and disk tiers below it.

Blocks are the prompt's full blocks, named as routers name them
(``tandem.kv.block_hashes``). On the device a block is *held* by the sequences using it;
when the last one lets go it stays *cached* in the pool's free space, as TensorRT-LLM's
block reuse keeps a freed block's KV until the block is allocated again. The engine counts
cached blocks as free, so admitting a sequence may take their room: ``evict`` then drops
the least recently released first, into the host tier, whose oldest block goes to disk,
whose oldest is gone (``tandem.kv.offload.tiers``, the reference engine's planning). A
prompt reuses its leading blocks: those the device holds as they are, then the run after
them that a tier holds, *onboarded* (the engine charges their bytes over the tier's link).

Every change of where a block lives is a KV event with its tier, as the reference
engine's: stored on the device when a block is first held (computed, received or
onboarded), removed from it when evicted, stored in and removed from each tier it passes.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tandem.kv.block_hashes import BlockName
from tandem.kv.events import BlocksRemoved, BlocksStored, KvCacheEvent, Tier
from tandem.kv.offload.stats import OffloadStats
from tandem.kv.offload.tiers import TIERS, Move, TierIndex, plan_offload, plan_onboarding


@dataclass(frozen=True, slots=True)
class PrefixHit:
    """A prompt's leading blocks that need no computing: ``device`` blocks reused in
    place, then ``onboarded`` blocks per tier they came back from."""

    device: int
    onboarded: Mapping[Tier, int] = field(default_factory=dict)

    @property
    def blocks(self) -> int:
        return self.device + sum(self.onboarded.values())


class KvReuse:
    def __init__(self, tier_blocks: Mapping[Tier, int]) -> None:
        """``tier_blocks``: what each offload tier holds, in blocks (absent or 0: none)."""
        self._held: Counter[int] = Counter()
        self._cached: OrderedDict[int, None] = OrderedDict()  # least recently released first
        self._tiers = TierIndex(tier_blocks)
        # block_hash -> (its parent's block_hash, its name), while any tier holds it:
        # what its events say.
        self._names: dict[int, tuple[int | None, BlockName]] = {}
        self._events: list[KvCacheEvent] = []
        self._offloaded: Counter[Tier] = Counter()
        self._onboarded: Counter[Tier] = Counter()
        self._dropped: Counter[Tier] = Counter()

    @property
    def cached(self) -> int:
        """Device blocks no sequence holds: they count as free pool blocks."""
        return len(self._cached)

    def acquire(self, names: Sequence[BlockName]) -> PrefixHit:
        """A prompt's blocks (``names``, in order) are about to be prefilled: hold the
        leading run the device has, then onboard the run after it the tiers have."""
        device = 0
        while device < len(names) and self._on_device(names[device].block_hash):
            device += 1
        rest = [name.block_hash for name in names[device:]]
        moves = plan_onboarding(self._tiers, rest, len(rest))
        onboarded: Counter[Tier] = Counter()
        for move in moves:
            assert move.source is not None
            onboarded[move.source] += 1
            self._apply(move)
        self.hold(names[: device + len(moves)], 0)
        self._onboarded.update(onboarded)
        return PrefixHit(device, dict(onboarded))

    def hold(self, names: Sequence[BlockName], start: int) -> None:
        """``names[start:]`` are now held by one more sequence (``names``: a prompt's
        blocks in order, so each block's parent is the one before it)."""
        run: list[BlockName] = []  # consecutive blocks new to the device: one event
        run_parent: int | None = None
        for index in range(start, len(names)):
            name = names[index]
            parent = names[index - 1].block_hash if index else None
            if self._on_device(name.block_hash):
                self._flush(run_parent, run)
            else:
                if not run:
                    run_parent = parent
                run.append(name)
                self._names[name.block_hash] = (parent, name)
            self._cached.pop(name.block_hash, None)
            self._held[name.block_hash] += 1
        self._flush(run_parent, run)

    def release(self, names: Sequence[BlockName]) -> None:
        """A sequence lets go of the blocks it held; tail first, so that a prompt's last
        blocks are evicted before the prefix they hang from."""
        for name in reversed(names):
            self._held[name.block_hash] -= 1
            if not self._held[name.block_hash]:
                del self._held[name.block_hash]
                self._cached[name.block_hash] = None

    def evict(self, free_blocks: int) -> None:
        """Make the cached blocks fit in the pool's ``free_blocks``: the least recently
        released leave the device, into the tiers where there are any."""
        while len(self._cached) > free_blocks:
            block_hash, _ = self._cached.popitem(last=False)
            self._events.append(BlocksRemoved((block_hash,), Tier.DEVICE))
            moves = plan_offload(self._tiers, block_hash)
            for move in moves:
                self._apply(move)
                if move.target is None:
                    assert move.source is not None
                    self._dropped[move.source] += 1
            for moved in {block_hash} | {move.block_hash for move in moves}:
                if self._tiers.where(moved) is None and not self._on_device(moved):
                    del self._names[moved]  # held nowhere any more

    def drain_events(self) -> list[KvCacheEvent]:
        """The changes since the previous call, oldest first."""
        events, self._events = self._events, []
        return events

    def stats(self) -> OffloadStats:
        return OffloadStats(
            blocks={tier: self._tiers.count(tier) for tier in TIERS},
            capacity={tier: self._tiers.capacity(tier) for tier in TIERS},
            offloaded=dict(self._offloaded),
            onboarded=dict(self._onboarded),
            damaged={},  # nothing is stored, so nothing can come back damaged
            dropped=dict(self._dropped),
            disabled=frozenset(),
        )

    def _flush(self, parent: int | None, run: list[BlockName]) -> None:
        if run:
            self._events.append(BlocksStored(parent, tuple(run), Tier.DEVICE))
            run.clear()

    def _on_device(self, block_hash: int) -> bool:
        return block_hash in self._held or block_hash in self._cached

    def _apply(self, move: Move) -> None:
        """Carry out a tier move and say so."""
        self._tiers.apply(move)
        parent, name = self._names[move.block_hash]
        if move.source is not None:
            self._events.append(BlocksRemoved((move.block_hash,), move.source))
        if move.target is not None:
            self._offloaded[move.target] += 1
            self._events.append(BlocksStored(parent, (name,), move.target))
