"""Bounded memory of which prompt prefixes went to which worker.

The router cannot see inside workers' KV caches, so it remembers what it sent where:
a per-worker LRU of block hashes (for decode overlap) and a prefix-key to prefill
worker map (for prefill affinity). Both are approximations with fixed memory bounds.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from tandem.router.policy import count_prefix_overlap


class _LruSet:
    __slots__ = ("_capacity", "_items")

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._items: OrderedDict[int, None] = OrderedDict()

    def add_all(self, keys: Iterable[int]) -> None:
        items = self._items
        for key in keys:
            items[key] = None
            items.move_to_end(key)
        while len(items) > self._capacity:
            items.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)


class PrefixIndex:
    def __init__(self, max_blocks_per_worker: int = 65536) -> None:
        self._max_blocks = max_blocks_per_worker
        self._by_worker: dict[str, _LruSet] = {}

    def record(self, worker: str, block_hashes: Sequence[int]) -> None:
        if not block_hashes:
            return
        blocks = self._by_worker.get(worker)
        if blocks is None:
            blocks = self._by_worker[worker] = _LruSet(self._max_blocks)
        blocks.add_all(block_hashes)

    def overlaps(self, block_hashes: Sequence[int]) -> dict[str, int]:
        """Leading blocks of the prompt each worker has seen (workers with 0 omitted)."""
        if not block_hashes:
            return {}
        result = {}
        for worker, blocks in self._by_worker.items():
            matched = count_prefix_overlap(block_hashes, blocks)
            if matched:
                result[worker] = matched
        return result

    def forget(self, worker: str) -> None:
        """The worker restarted or left: whatever it cached is gone."""
        self._by_worker.pop(worker, None)

    def size(self, worker: str) -> int:
        blocks = self._by_worker.get(worker)
        return len(blocks) if blocks is not None else 0


class AffinityMap:
    """Prefix key -> the prefill worker that last took it (LRU-bounded)."""

    def __init__(self, capacity: int = 65536) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[int, str] = OrderedDict()

    def get(self, key: int | None) -> str | None:
        if key is None:
            return None
        return self._entries.get(key)

    def set(self, key: int | None, worker: str) -> None:
        if key is None:
            return
        self._entries[key] = worker
        self._entries.move_to_end(key)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)

    def forget_worker(self, worker: str) -> None:
        for key in [k for k, w in self._entries.items() if w == worker]:
            del self._entries[key]
