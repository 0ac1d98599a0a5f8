"""KV cache events: what an engine's reusable KV blocks are, as they change (pure types).

They follow Dynamo's ``KvCacheEvent`` (``stored`` / ``removed`` / ``cleared``; blocks
named as in ``kv.block_hashes``) so a router applies them to Dynamo's ``RadixTree``
unchanged. An engine with a prefix cache emits them as blocks become reusable (a full
prompt block was computed or received) and stop being so (evicted); an engine without
one emits nothing, and no router ever believes it holds anything.

``KvCacheState`` mirrors one engine's blocks from its events, so that a worker can hand
every new subscriber an exact snapshot without asking the engine.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from tandem.kv.block_hashes import BlockName


@dataclass(frozen=True, slots=True)
class BlocksStored:
    parent_hash: int | None  # block_hash of the block before the first; None: none
    blocks: tuple[BlockName, ...]  # consecutive, in prompt order


@dataclass(frozen=True, slots=True)
class BlocksRemoved:
    block_hashes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AllCleared:
    pass


KvCacheEvent = BlocksStored | BlocksRemoved | AllCleared


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
    """The set of blocks an engine holds, rebuilt from its events."""

    def __init__(self) -> None:
        self._blocks: dict[int, _Entry] = {}  # insertion order: parents before children

    def apply(self, event: KvCacheEvent) -> None:
        if isinstance(event, BlocksStored):
            parent = event.parent_hash
            for block in event.blocks:
                self._blocks.setdefault(block.block_hash, _Entry(parent, block.tokens_hash))
                parent = block.block_hash
        elif isinstance(event, BlocksRemoved):
            for block_hash in event.block_hashes:
                self._blocks.pop(block_hash, None)
        else:
            self._blocks.clear()

    def snapshot(self) -> list[BlocksStored]:
        """Every block still reachable from the start of a prompt, parents first (a
        block whose parent is gone can never be matched, so it is left out)."""
        children: dict[int | None, list[int]] = {}
        for block_hash, entry in self._blocks.items():
            children.setdefault(entry.parent, []).append(block_hash)
        out = []
        frontier = list(children.get(None, ()))
        while frontier:
            block_hash = frontier.pop()
            entry = self._blocks[block_hash]
            out.append(BlocksStored(entry.parent, (BlockName(block_hash, entry.tokens_hash),)))
            frontier.extend(children.get(block_hash, ()))
        return out

    def __len__(self) -> int:
        return len(self._blocks)

    def __iter__(self) -> Iterator[int]:
        return iter(self._blocks)


def count_blocks(events: Sequence[KvCacheEvent]) -> int:
    """Blocks named by ``events`` (for metrics)."""
    total = 0
    for event in events:
        if isinstance(event, BlocksStored):
            total += len(event.blocks)
        elif isinstance(event, BlocksRemoved):
            total += len(event.block_hashes)
    return total
