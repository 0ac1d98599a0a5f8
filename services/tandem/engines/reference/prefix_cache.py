"""The prefix cache: full KV blocks named by their content, shared across requests.

A *logical* block is ``kv_block_size`` consecutive tokens of a sequence; its cache entry
holds that block's physical block in every layer, named as ``tandem.kv.block_hashes``
names blocks (``block_hash`` chains the tokens with the whole prefix before them). An
entry is added when a block is full in every layer (computed here or received over a
KV transfer), only if its parent is cached too, so the cache is always prefix-closed:
every entry is reachable from the start of some prompt, which is what a router indexing
our events can match. Sequences share an entry's physical blocks by reference count
(``KvPool``); an entry stays after its last user leaves, until the pool needs the room.
Eviction then takes, least recently freed first, an unused *leaf* entry (no cached
block after it, so chains shrink from their tail); failing that a leaf that a running
sequence still partly holds (a window layer's block it let go of), and failing that any
entry, together with every entry below it (a block without its parent can never be
matched). A sequence keeps the blocks it holds either way; they are just no longer
named.

An engine with offload tiers sets ``on_drop``: it sees each entry as it is removed, while
its blocks still hold its bytes.

The engine reports exactly what is cached: ``BlocksStored`` when entries are added,
``BlocksRemoved`` when they go (``drain_events``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from tandem.engines.reference.kv_pool import KvPool
from tandem.kv.block_hashes import BlockName
from tandem.kv.events import BlocksRemoved, BlocksStored, KvCacheEvent


@dataclass(slots=True)
class CacheEntry:
    name: BlockName
    parent: int | None  # block_hash of the block before; None for a prompt's first block
    blocks: tuple[int, ...]  # physical block per layer
    children: set[int] = field(default_factory=set)


class PrefixCache:
    def __init__(self, pool: KvPool) -> None:
        self._pool = pool
        self._entries: dict[int, CacheEntry] = {}
        self._owner: dict[int, int] = {}  # physical block -> block_hash of its entry
        self._events: list[KvCacheEvent] = []
        self.on_drop: Callable[[CacheEntry], None] | None = None
        pool.on_evict = self._evict

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._entries

    def match(self, names: Sequence[BlockName]) -> list[CacheEntry]:
        """Entries of the longest cached prefix of ``names`` (a prompt's blocks)."""
        found = []
        for name in names:
            entry = self._entries.get(name.block_hash)
            if entry is None:
                break
            found.append(entry)
        return found

    def store(
        self, parent: int | None, blocks: Sequence[tuple[BlockName, tuple[int, ...]]]
    ) -> bool:
        """Name consecutive full blocks following ``parent`` (``(name, physical block per
        layer)`` each). Blocks already cached under that name are left as they are (the
        caller keeps its own copy private). Returns False, storing nothing more, once the
        chain is broken: ``parent`` is not cached (it was evicted)."""
        if parent is not None and parent not in self._entries:
            return False
        run_parent: int | None = parent
        run: list[BlockName] = []
        for name, physical in blocks:
            if name.block_hash in self._entries:
                self._flush(run_parent, run)
                run_parent, run = name.block_hash, []
            else:
                entry = CacheEntry(name, parent, tuple(physical))
                self._entries[name.block_hash] = entry
                if parent is not None:
                    self._entries[parent].children.add(name.block_hash)
                for block in entry.blocks:
                    assert block not in self._owner, f"block {block} is cached twice"
                    self._owner[block] = name.block_hash
                    self._pool.mark_cached(block)
                run.append(name)
            parent = name.block_hash
        self._flush(run_parent, run)
        return True

    def drain_events(self) -> list[KvCacheEvent]:
        events, self._events = self._events, []
        return events

    def _flush(self, parent: int | None, run: list[BlockName]) -> None:
        if run:
            self._events.append(BlocksStored(parent, tuple(run)))

    def _evict(self) -> None:
        """Drop one entry that has a free block (the pool needs room)."""
        fallback_leaf: int | None = None
        oldest: int | None = None
        for block in self._pool.cached_free():
            entry = self._entries[self._owner[block]]
            oldest = entry.name.block_hash if oldest is None else oldest
            if entry.children:
                continue
            if all(self._pool.refs(b) == 0 for b in entry.blocks):
                self._drop(entry.name.block_hash)
                return
            if fallback_leaf is None:
                fallback_leaf = entry.name.block_hash
        victim = fallback_leaf if fallback_leaf is not None else oldest
        assert victim is not None, "eviction with no cached free block"
        self._drop(victim)

    def _drop(self, block_hash: int) -> None:
        """Remove an entry and every entry below it."""
        removed: list[int] = []
        pending = [block_hash]
        while pending:
            entry = self._entries.pop(pending.pop())
            removed.append(entry.name.block_hash)
            if entry.parent is not None and entry.parent in self._entries:
                self._entries[entry.parent].children.discard(entry.name.block_hash)
            pending.extend(entry.children)
            if self.on_drop is not None:
                self.on_drop(entry)
            for physical in entry.blocks:
                del self._owner[physical]
            self._pool.uncache(entry.blocks)
        self._events.append(BlocksRemoved(tuple(removed)))

    def __iter__(self) -> Iterator[int]:
        """block_hash of every cached block."""
        return iter(self._entries)
