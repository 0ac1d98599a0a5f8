"""The reference engine's side of KV offload (``tandem.kv.offload``): entries its prefix
cache evicts go down to the tiers, and before a prompt is prefilled the blocks after its
cached prefix that a tier holds come back (*onboarding*) and are cached again, so the
prompt reuses them instead of computing them.

Onboarding stops at the first block that is missing or comes back damaged: the prefix
cache is prefix-closed, so nothing after it could be used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from tandem.engines.reference.config import ReferenceModelConfig
from tandem.engines.reference.kv_pool import KvPool
from tandem.engines.reference.prefix_cache import CacheEntry, PrefixCache
from tandem.kv.block_hashes import BlockName
from tandem.kv.offload import OffloadSettings, OffloadStore


def open_offload(
    config: ReferenceModelConfig, pool: KvPool, cache: PrefixCache | None
) -> OffloadStore | None:
    """The tiers the config asks for, fed by ``cache``'s evictions; None without any."""
    if cache is None or not (config.offload_host_bytes or config.offload_disk_bytes):
        return None
    settings = OffloadSettings(
        host_bytes=config.offload_host_bytes,
        disk_bytes=config.offload_disk_bytes,
        disk_path=Path(config.offload_disk_path) if config.offload_disk_path else None,
    )
    store = OffloadStore(settings, pool.blocks, config.num_layers)
    cache.on_drop = lambda entry: store.offload(entry.name, entry.parent, entry.blocks)
    return store


def onboard(
    pool: KvPool,
    cache: PrefixCache,
    store: OffloadStore,
    names: Sequence[BlockName],
    cached: Sequence[CacheEntry],
    layers: int,
    available: Callable[[], int],
) -> int:
    """Bring back the blocks of ``names`` after ``cached`` (their cached prefix) that the
    tiers hold, ``layers`` pool blocks each, within the pool blocks ``available()``
    leaves, and cache them again. Returns how many came back."""
    # The cached prefix is what the onboarded blocks hang from: pinned, so that making
    # room for them cannot evict it (and what it pins is no longer available).
    pinned = [block for entry in cached for block in entry.blocks]
    for block in pinned:
        pool.incref(block)
    wanted = store.plan([n.block_hash for n in names[len(cached) :]], available() // layers)
    physical = pool.allocate(len(wanted) * layers)
    loaded: list[tuple[BlockName, tuple[int, ...]]] = []
    for i, block_hash in enumerate(wanted):
        blocks = tuple(physical[i * layers : (i + 1) * layers])
        if not store.load(block_hash, blocks):
            break
        loaded.append((names[len(cached) + i], blocks))
    parent = cached[-1].name.block_hash if cached else None
    stored = cache.store(parent, loaded)
    assert stored, "the pinned prefix of onboarded blocks was evicted"
    # Tail first, as a released sequence does: a block is only useful after its parents.
    pool.decref(physical[::-1])
    pool.decref(pinned[::-1])
    return len(loaded)
