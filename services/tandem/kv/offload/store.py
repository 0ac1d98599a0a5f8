"""The offload tiers' I/O shell: carries out the moves ``tiers`` plans, with the bytes.

A *block* here is one prefix-cache entry: the same logical block in every layer, so
``layers`` physical blocks of the device pool. The host tier is an arena of such blocks
allocated at start-up; the disk tier a ``DiskFile`` of slots. Each block's digest
(``records``) is taken as it leaves the device pool and checked when it comes back, from
either tier; a damaged block is counted, forgotten and reported as missing, so the
engine recomputes it. Reading a block back is split in three, so that the bytes can move
on another thread while the engine steps (``tandem.engines.reference.offload``): the
engine's thread ``claim``s the blocks (out of their tiers, their places kept), any thread
``read``s a claimed block, and the engine's thread ``settle``s what was read (or
``restore``s what was not). Every change of tier is also a KV event (``tandem.kv.events``,
``drain_events``): a block entering a tier is stored there, one leaving it removed, so
routers see which tier holds what. A failed disk write gives up the disk tier until
restart (logged once, ``disabled`` in the stats): offloading goes on with the tiers
left, and no request sees the failure.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tandem.kv.block_hashes import BlockName
from tandem.kv.events import BlocksRemoved, BlocksStored, KvCacheEvent, Tier
from tandem.kv.offload.disk import Chunk, DiskError, DiskFile
from tandem.kv.offload.records import (
    HEADER,
    Damage,
    check_header,
    check_payload,
    compute_digest,
    pack_header,
)
from tandem.kv.offload.stats import OffloadStats
from tandem.kv.offload.tiers import TIERS, Move, TierIndex, plan_offload, plan_onboarding

logger = logging.getLogger(__name__)

Float32Array = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Claim:
    """A block taken out of ``tier`` to be read back from its ``slot`` there."""

    block_hash: int
    tier: Tier
    slot: int
    digest: bytes


@dataclass(frozen=True, slots=True)
class Readback:
    """A claimed block read into the device pool: intact (``damage`` None) or not."""

    claim: Claim
    damage: Damage | None
    seconds: float


@dataclass(frozen=True, slots=True)
class OffloadSettings:
    host_bytes: int = 0
    disk_bytes: int = 0
    disk_path: Path | None = None


class OffloadStore:
    def __init__(self, settings: OffloadSettings, pool: Float32Array, layers: int) -> None:
        self._pool = pool  # [blocks, block_size, 2, kv_heads, head_dim]
        self.payload_bytes = layers * pool[0].nbytes
        host_slots = settings.host_bytes // self.payload_bytes
        # Written now (np.zeros maps lazily; fill touches every page), as the device pool
        # is, so that a memory limit is met at start-up rather than hours into serving.
        self._arena: Float32Array = np.empty((host_slots, layers, *pool.shape[1:]), np.float32)
        self._arena.fill(0.0)
        self._disabled: set[Tier] = set()
        self.disk: DiskFile | None = None
        disk_slots = settings.disk_bytes // (HEADER.size + self.payload_bytes)
        if disk_slots and settings.disk_path is not None:
            regions = [array.data.cast("B") for array in (pool, self._arena) if array.size]
            try:
                self.disk = DiskFile(settings.disk_path, disk_slots, self.payload_bytes, regions)
            except OSError as exc:
                self._give_up(Tier.DISK, exc)
        capacity = {Tier.HOST: host_slots, Tier.DISK: disk_slots if self.disk else 0}
        self.index = TierIndex(capacity)
        self._free = {tier: list(range(capacity[tier] - 1, -1, -1)) for tier in TIERS}
        self._slot: dict[int, int] = {}  # block_hash -> its slot in its tier
        self._digest: dict[int, bytes] = {}
        # block_hash -> (its parent's block_hash, its name): what its events say.
        self._names: dict[int, tuple[int | None, BlockName]] = {}
        self._events: list[KvCacheEvent] = []
        logger.info(
            "KV offload: host tier %d blocks (%.0f MiB), disk tier %d blocks (%.0f MiB) in %s",
            capacity[Tier.HOST],
            self._arena.nbytes / 2**20,
            capacity[Tier.DISK],
            settings.disk_bytes / 2**20 if self.disk else 0,
            self.disk.path.parent if self.disk else "-",
        )
        self._offloaded: Counter[Tier] = Counter()
        self._onboarded: Counter[Tier] = Counter()
        self._onboard_seconds: dict[Tier, float] = dict.fromkeys(TIERS, 0.0)
        self._damaged: Counter[Tier] = Counter()
        self._dropped: Counter[Tier] = Counter()

    # -- what the engine calls --------------------------------------------------------

    def offload(self, name: BlockName, parent: int | None, physical: Sequence[int]) -> None:
        """Keep a block the device pool is about to reuse (its bytes are still there);
        ``parent``: the block_hash of the block before it, None for a prompt's first."""
        for move in plan_offload(self.index, name.block_hash):
            self._carry(move, physical, (parent, name))

    def drain_events(self) -> list[KvCacheEvent]:
        """The tier changes since the previous call, oldest first."""
        events, self._events = self._events, []
        return events

    def claim(self, hashes: Sequence[int], limit: int) -> list[Claim]:
        """Take the leading blocks of ``hashes`` the tiers hold, at most ``limit``, out of
        them to be read back. Each is then settled (read) or restored (not read)."""
        claims = []
        for move in plan_onboarding(self.index, hashes, limit):
            tier = self.index.claim(move.block_hash)
            self._events.append(BlocksRemoved((move.block_hash,), tier))
            slot = self._slot.pop(move.block_hash)
            claims.append(Claim(move.block_hash, tier, slot, self._digest.pop(move.block_hash)))
        return claims

    def read(self, claim: Claim, physical: Sequence[int]) -> Readback:
        """Read a claimed block into the device pool's ``physical`` blocks (one per
        layer) and check it. Safe on any thread, for claims of distinct blocks."""
        started = time.perf_counter()
        damage = self._read(claim.tier, claim.slot, claim.block_hash, claim.digest, physical)
        return Readback(claim, damage, time.perf_counter() - started)

    def settle(self, readback: Readback) -> None:
        """The claimed block has left its tier: free its place; a damaged one is counted
        and said, and the engine computes it instead."""
        claim = readback.claim
        self._let_go(claim)
        if readback.damage is not None:
            logger.warning(
                "KV offload: block %016x from the %s tier is %s; recomputing it",
                claim.block_hash,
                claim.tier,
                readback.damage,
            )
            self._damaged[claim.tier] += 1
            return
        self._onboarded[claim.tier] += 1
        self._onboard_seconds[claim.tier] += readback.seconds

    def restore(self, claim: Claim) -> None:
        """A claimed block that was not read goes back into its place, as it was; unless a
        newer copy of it (computed again, then evicted) entered the tiers meanwhile."""
        if self.index.where(claim.block_hash) is not None:
            self._let_go(claim)
            return
        self.index.restore(claim.block_hash, claim.tier)
        self._slot[claim.block_hash] = claim.slot
        self._digest[claim.block_hash] = claim.digest
        parent, name = self._names[claim.block_hash]
        self._events.append(BlocksStored(parent, (name,), claim.tier))

    def stats(self) -> OffloadStats:
        return OffloadStats(
            blocks={tier: self.index.count(tier) for tier in TIERS},
            capacity={tier: self.index.capacity(tier) for tier in TIERS},
            offloaded=dict(self._offloaded),
            onboarded=dict(self._onboarded),
            damaged=dict(self._damaged),
            dropped=dict(self._dropped),
            disabled=frozenset(self._disabled),
            onboard_seconds={t: s for t, s in self._onboard_seconds.items() if s},
        )

    def _let_go(self, claim: Claim) -> None:
        """Free a claimed block's place; its name stays while a newer copy is held."""
        self.index.settle(claim.tier)
        self._free[claim.tier].append(claim.slot)
        if self.index.where(claim.block_hash) is None:
            del self._names[claim.block_hash]

    # -- moves ------------------------------------------------------------------------

    def _carry(
        self, move: Move, physical: Sequence[int], entering: tuple[int | None, BlockName]
    ) -> None:
        """Carry out ``move``; ``entering`` names the block leaving the device pool."""
        if move.target is None:
            assert move.source is not None
            self._dropped[move.source] += 1
            self._forget(move)
            return
        slot = self._free[move.target].pop()
        try:
            if move.source is None:
                digest = self._store_from_device(move.target, slot, move.block_hash, physical)
            else:
                digest = self._digest[move.block_hash]
                self._write_disk(slot, move.block_hash, digest, self._host_chunks(move))
        except DiskError as exc:
            self._free[move.target].append(slot)
            self._disable_disk(exc)
            if move.source is not None:
                self._dropped[move.source] += 1
                self._forget(Move(move.block_hash, move.source, None))
            return
        if move.source is None:
            self._names[move.block_hash] = entering
        else:
            self._release(move)
        self._apply(move)
        self._slot[move.block_hash] = slot
        self._digest[move.block_hash] = digest
        self._offloaded[move.target] += 1

    def _store_from_device(
        self, tier: Tier, slot: int, block_hash: int, physical: Sequence[int]
    ) -> bytes:
        if tier is Tier.HOST:
            np.take(self._pool, physical, axis=0, out=self._arena[slot])
            return compute_digest([self._arena[slot].data.cast("B")])
        digest = compute_digest(self._pool[b].data.cast("B") for b in physical)
        self._write_disk(slot, block_hash, digest, self._pool_chunks(physical))
        return digest

    def _write_disk(self, slot: int, block_hash: int, digest: bytes, chunks: list[Chunk]) -> None:
        assert self.disk is not None
        self.disk.write(slot, pack_header(block_hash, self.payload_bytes, digest), chunks)

    def _read(
        self, tier: Tier, slot: int, block_hash: int, digest: bytes, physical: Sequence[int]
    ) -> Damage | None:
        if tier is Tier.HOST:
            damage = check_payload([self._arena[slot].data.cast("B")], digest)
            if damage is None:
                self._pool[list(physical)] = self._arena[slot]
            return damage
        assert self.disk is not None
        try:
            header = self.disk.read(slot, self._pool_chunks(physical))
        except DiskError as exc:
            logger.warning("KV offload: reading block %016x failed: %s", block_hash, exc)
            return Damage.TORN
        return check_header(header, block_hash, self.payload_bytes, digest) or check_payload(
            (self._pool[b].data.cast("B") for b in physical), digest
        )

    def _forget(self, move: Move) -> None:
        self._release(move)
        self._apply(move)

    def _apply(self, move: Move) -> None:
        self.index.apply(move)
        self._record(move)

    def _record(self, move: Move) -> None:
        """The KV events of an applied ``move``."""
        parent, name = self._names[move.block_hash]
        if move.source is not None:
            self._events.append(BlocksRemoved((move.block_hash,), move.source))
        if move.target is not None:
            self._events.append(BlocksStored(parent, (name,), move.target))
        else:
            del self._names[move.block_hash]

    def _release(self, move: Move) -> None:
        """Free the slot ``move.block_hash`` held in ``move.source``."""
        assert move.source is not None
        self._free[move.source].append(self._slot.pop(move.block_hash))
        del self._digest[move.block_hash]

    def _pool_chunks(self, physical: Sequence[int]) -> list[Chunk]:
        size = self._pool[0].nbytes
        return [(self._pool.ctypes.data + block * size, size) for block in physical]

    def _host_chunks(self, move: Move) -> list[Chunk]:
        return [(self._arena[self._slot[move.block_hash]].ctypes.data, self.payload_bytes)]

    def _disable_disk(self, exc: Exception) -> None:
        self._give_up(Tier.DISK, exc)
        for drop in self.index.disable(Tier.DISK):
            self._dropped[Tier.DISK] += 1
            self._release(drop)
            self._record(drop)

    def _give_up(self, tier: Tier, exc: Exception) -> None:
        """Said once per tier: the log line, and ``disabled`` in the stats."""
        if tier not in self._disabled:
            logger.error(
                "KV offload: the %s tier failed (%s); going on without it until restart",
                tier,
                exc,
            )
        self._disabled.add(tier)
