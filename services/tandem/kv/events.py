"""KV cache events: what an engine's reusable KV blocks are, as they change (pure types).

They follow Dynamo's ``KvCacheEvent`` (``stored`` / ``removed`` / ``cleared``; blocks
named as in ``kv.block_hashes``) so a router applies them to Dynamo's ``RadixTree``
unchanged. An engine with a prefix cache emits them as blocks become reusable (a full
prompt block was computed or received) and stop being so (evicted); an engine without
one emits nothing, and no router ever believes it holds anything.

Each event names the tier it is about (``Tier``): the device pool, or an offload tier
below it (``tandem.kv.offload``). A block offloaded from the device pool is removed from
``DEVICE`` and stored in ``HOST``; onboarding it back is the reverse. The tiers are
separate sets, so a router applies ``DEVICE`` events to Dynamo's radix tree as before
(a tree without a tier notion) and keeps the lower tiers beside it.

``KvCacheState`` mirrors one engine's blocks from its events, so that a worker can hand
every new subscriber an exact snapshot without asking the engine.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from tandem.kv.block_hashes import BlockName


class Tier(enum.StrEnum):
    """Where a worker holds a block, fastest first."""

    DEVICE = "device"  # the engine's KV pool: reused as is
    HOST = "host"  # host memory: onboarded before reuse
    DISK = "disk"  # local disk: onboarded before reuse


@dataclass(frozen=True, slots=True)
class BlocksStored:
    parent_hash: int | None  # block_hash of the block before the first; None: none
    blocks: tuple[BlockName, ...]  # consecutive, in prompt order
    tier: Tier = Tier.DEVICE


@dataclass(frozen=True, slots=True)
class BlocksRemoved:
    block_hashes: tuple[int, ...]
    tier: Tier = Tier.DEVICE


@dataclass(frozen=True, slots=True)
class AllCleared:
    pass


KvCacheEvent = BlocksStored | BlocksRemoved | AllCleared

LOWER_TIERS = (Tier.HOST, Tier.DISK)  # below the device pool, fastest first


class KvEventSource(Protocol):
    """An engine that reports its reusable KV blocks (called on the engine's thread)."""

    def drain_kv_events(self) -> list[KvCacheEvent]:
        """Events since the previous call, oldest first."""
        ...


@dataclass(slots=True)
class _Entry:
    parent: int | None
    tokens_hash: int


class KvCacheState:
    """The blocks an engine holds in each tier, rebuilt from its events."""

    def __init__(self) -> None:
        # Insertion order: parents before children.
        self._blocks: dict[Tier, dict[int, _Entry]] = {tier: {} for tier in Tier}

    def apply(self, event: KvCacheEvent) -> None:
        if isinstance(event, BlocksStored):
            blocks = self._blocks[event.tier]
            parent = event.parent_hash
            for block in event.blocks:
                blocks.setdefault(block.block_hash, _Entry(parent, block.tokens_hash))
                parent = block.block_hash
        elif isinstance(event, BlocksRemoved):
            blocks = self._blocks[event.tier]
            for block_hash in event.block_hashes:
                blocks.pop(block_hash, None)
        else:
            for blocks in self._blocks.values():
                blocks.clear()

    def snapshot(self) -> list[BlocksStored]:
        """Every device block still reachable from the start of a prompt, parents first
        (a block whose parent is gone can never be matched, so it is left out), then
        every block of the lower tiers. Those are kept whatever their parents: a prompt
        reaches them by ``block_hash``, which names the whole prefix, through blocks that
        may sit in any tier."""
        device = self._blocks[Tier.DEVICE]
        children: dict[int | None, list[int]] = {}
        for block_hash, entry in device.items():
            children.setdefault(entry.parent, []).append(block_hash)
        out = []
        frontier = list(children.get(None, ()))
        while frontier:
            block_hash = frontier.pop()
            entry = device[block_hash]
            out.append(BlocksStored(entry.parent, (BlockName(block_hash, entry.tokens_hash),)))
            frontier.extend(children.get(block_hash, ()))
        for tier in LOWER_TIERS:
            for block_hash, entry in self._blocks[tier].items():
                name = BlockName(block_hash, entry.tokens_hash)
                out.append(BlocksStored(entry.parent, (name,), tier))
        return out

    def __len__(self) -> int:
        """Blocks held in any tier."""
        return sum(len(blocks) for blocks in self._blocks.values())

    def __iter__(self) -> Iterator[int]:
        """block_hash of every block the device pool holds."""
        return iter(self._blocks[Tier.DEVICE])


def count_blocks(events: Sequence[KvCacheEvent]) -> int:
    """Blocks named by ``events`` (for metrics)."""
    total = 0
    for event in events:
        if isinstance(event, BlocksStored):
            total += len(event.blocks)
        elif isinstance(event, BlocksRemoved):
            total += len(event.block_hashes)
    return total
