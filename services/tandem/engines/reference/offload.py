"""The reference engine's side of KV offload (``tandem.kv.offload``): entries its prefix
cache evicts go down to the tiers, and the blocks after a new prompt's cached prefix
that a tier holds come back (*onboarding*) and are cached again, so the prompt reuses
them instead of computing them.

Onboarding overlaps the engine's steps: the blocks are claimed and given pool blocks on
the engine's thread, their bytes are read and checked on the onboarding thread (NIXL's
file reads and the digests let go of the GIL), and the engine's thread takes the result
between two steps (``Onboarding.finish``). Meanwhile the engine steps its other
sequences. It stops at the first block that is missing or comes back damaged: the
prefix cache is prefix-closed, so nothing after it could be used, and the blocks after
it go back to their tiers unread.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence
from pathlib import Path

from tandem.engines.reference.config import ReferenceModelConfig
from tandem.engines.reference.kv_pool import KvPool
from tandem.engines.reference.prefix_cache import CacheEntry, PrefixCache
from tandem.kv.block_hashes import BlockName
from tandem.kv.offload import OffloadSettings, OffloadStore
from tandem.kv.offload.store import Claim, Readback


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


class Onboarding:
    """Blocks of one prompt on their way back from the tiers into pool blocks of their
    own (``blocks``: one per layer each), after the prompt's cached prefix, which stays
    pinned until they are cached under it."""

    def __init__(
        self,
        pool: KvPool,
        cache: PrefixCache,
        store: OffloadStore,
        claims: list[Claim],
        names: Sequence[BlockName],
        cached: Sequence[CacheEntry],
        layers: int,
    ) -> None:
        self._pool, self._cache, self._store, self._claims = pool, cache, store, claims
        self._names = names
        self._parent = cached[-1].name.block_hash if cached else None
        self._pinned = [block for entry in cached for block in entry.blocks]
        for block in self._pinned:
            pool.incref(block)
        physical = pool.allocate(len(claims) * layers)
        self.blocks = [tuple(physical[i * layers : (i + 1) * layers]) for i in range(len(claims))]
        self._future: concurrent.futures.Future[list[Readback]] | None = None

    def start(self, reader: concurrent.futures.Executor) -> None:
        self._future = reader.submit(self._read)

    def done(self) -> bool:
        return self._future is not None and self._future.done()

    def wait(self, timeout: float) -> None:
        if self._future is not None:
            concurrent.futures.wait([self._future], timeout)

    def finish(self) -> int:
        """Cache what came back intact, give every other block back, and return how
        many came back: the leading ones."""
        assert self._future is not None
        readbacks = self._future.result()
        for readback in readbacks:
            self._store.settle(readback)
        loaded = len(readbacks) - (1 if readbacks and readbacks[-1].damage else 0)
        for claim in self._claims[len(readbacks) :]:
            self._store.restore(claim)
        back = list(zip(self._names[:loaded], self.blocks[:loaded], strict=True))
        stored = self._cache.store(self._parent, back)
        assert stored, "the pinned prefix of onboarded blocks was evicted"
        self._release()
        return loaded

    def cancel(self) -> None:
        """Give the claims back to their tiers unread, and every block back to the pool."""
        assert self._future is None, "the blocks are being read"
        for claim in self._claims:
            self._store.restore(claim)
        self._release()

    def _read(self) -> list[Readback]:
        """On the onboarding thread: the blocks in order, up to the first damaged one."""
        readbacks = []
        for claim, blocks in zip(self._claims, self.blocks, strict=True):
            readbacks.append(self._store.read(claim, blocks))
            if readbacks[-1].damage is not None:
                break
        return readbacks

    def _release(self) -> None:
        # Tail first, as a released sequence does: a block is only useful after its parents.
        self._pool.decref([block for blocks in self.blocks for block in blocks][::-1])
        self._pool.decref(self._pinned[::-1])


def claim_onboarding(
    pool: KvPool,
    cache: PrefixCache,
    store: OffloadStore,
    names: Sequence[BlockName],
    cached: Sequence[CacheEntry],
    layers: int,
    available: Callable[[], int],
) -> Onboarding | None:
    """Claim the blocks of ``names`` after ``cached`` (their cached prefix) that the tiers
    hold, as many as the pool blocks ``available()`` leaves can take, ``layers`` each;
    None when the tiers hold none of them."""
    rest = names[len(cached) :]
    # The prefix's free blocks are about to be pinned: no longer available to the claims.
    pinned = [block for entry in cached for block in entry.blocks if not pool.refs(block)]
    room = (available() - len(pinned)) // layers
    claims = store.claim([n.block_hash for n in rest], room)
    if not claims:
        return None
    return Onboarding(pool, cache, store, claims, rest[: len(claims)], cached, layers)
