"""Where prompt prefixes are cached: Dynamo's radix tree over every worker's KV events.

Built on ``dynamo.llm.RadixTree`` from ai-dynamo-runtime 1.6.1 (``dynamo/_core.pyi``:
``apply_event(worker_id: int, kv_cache_event_bytes: bytes)``, ``find_matches(sequence:
list[int], early_exit=False) -> OverlapScores`` whose ``scores`` map ``(worker_id,
dp_rank)`` to matched blocks, ``remove_worker(worker_id)``). Events are Dynamo's
``KvCacheEvent`` JSON (``{"event_id", "data": {"stored": {"parent_hash", "blocks":
[{"block_hash", "tokens_hash"}]}} | {"removed": {"block_hashes"}} | "cleared"}``), as its
own bindings tests build them (ai-dynamo/dynamo ``lib/bindings/python/tests``). Prompts
are looked up by ``tokens_hash`` (``kv.block_hashes``).

The tree holds the device pool's blocks only (events of ``Tier.DEVICE``); each worker's
offload tiers (host, disk) are kept beside it (``kv_tiers``), and a lookup reports how
many of the prompt's tokens each worker holds in each tier.

Workers are known here by address; each gets a small integer id for the tree, and
workers with different block sizes live in different trees. A snapshot replaces
everything a worker had; ``remove`` forgets a worker that left or restarted.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dynamo.llm import RadixTree

from tandem.kv.block_hashes import chain_block_hashes, compute_tokens_hashes
from tandem.kv.events import AllCleared, BlocksRemoved, BlocksStored, KvCacheEvent, Tier
from tandem.router.kv_tiers import LowerTiers
from tandem.worker.types import KvEventBatch

logger = logging.getLogger(__name__)


class StaleBatchError(ValueError):
    """A delta for a worker (or incarnation) the index has no snapshot of."""


@dataclass(frozen=True, slots=True)
class _Member:
    tree_id: int
    block_size: int
    incarnation: str


@dataclass(frozen=True, slots=True)
class Applied:
    events: int
    skipped: int  # events the tree refused (an unknown parent or block: nothing to do)


class KvIndex:
    def __init__(self) -> None:
        self._trees: dict[int, RadixTree] = {}  # block size -> tree
        self._members: dict[str, _Member] = {}
        self._lower: dict[str, LowerTiers] = {}
        self._addresses: dict[int, str] = {}
        self._ids = itertools.count(1)
        self._event_ids = itertools.count(1)

    def apply(self, address: str, batch: KvEventBatch) -> Applied:
        """Apply one batch of ``address``'s stream (a snapshot replaces what it had)."""
        member = self._members.get(address)
        if batch.snapshot:
            self.remove(address)
            member = _Member(next(self._ids), batch.block_size, batch.incarnation)
            self._members[address] = member
            self._addresses[member.tree_id] = address
            self._lower[address] = LowerTiers()
        elif member is None or member.incarnation != batch.incarnation:
            raise StaleBatchError(
                f"KV events of {address} ({batch.incarnation}) arrived without a snapshot"
            )
        tree = self._trees.get(member.block_size)
        if tree is None:
            tree = self._trees[member.block_size] = RadixTree()
        lower = self._lower[address]
        skipped = 0
        for event in batch.events:
            if isinstance(event, AllCleared):
                lower.apply(event)  # and the tree below
            elif event.tier is not Tier.DEVICE:
                lower.apply(event)
                continue
            try:
                tree.apply_event(member.tree_id, self._encode(event))
            except RuntimeError as exc:
                # The tree skipped it (a parent or block it does not hold): harmless for
                # matching, but counted so a steady stream of them gets noticed.
                logger.debug("KV event of %s skipped: %s", address, exc)
                skipped += 1
        return Applied(len(batch.events), skipped)

    def remove(self, address: str, *, unless_incarnation: str | None = None) -> bool:
        """Forget ``address`` (it left, or restarted: unless the index already holds
        ``unless_incarnation``, the new process's snapshot). True if it was known."""
        member = self._members.get(address)
        if member is None or member.incarnation == unless_incarnation:
            return False
        del self._members[address]
        del self._addresses[member.tree_id]
        del self._lower[address]
        self._trees[member.block_size].remove_worker(member.tree_id)
        return True

    def cached_tokens(self, prompt: Sequence[int]) -> dict[str, int]:
        """Prompt tokens each worker holds as a cached prefix in its device pool
        (workers with none left out)."""
        return {
            address: held[Tier.DEVICE]
            for address, held in self.cached_by_tier(prompt).items()
            if held.get(Tier.DEVICE)
        }

    def cached_by_tier(self, prompt: Sequence[int]) -> dict[str, dict[Tier, int]]:
        """Per worker, the tokens of its cached prefix of ``prompt`` each tier holds: a
        run in the device pool, then on through its host and disk blocks (workers with
        none left out; tiers with none too)."""
        cached: dict[str, dict[Tier, int]] = {}
        for block_size, tree in self._trees.items():
            tokens_hashes = compute_tokens_hashes(prompt, block_size)
            if not tokens_hashes:
                continue
            # 1.6.1 keys scores by (worker_id, dp_rank), although its .pyi says int.
            scores: Any = tree.find_matches(tokens_hashes).scores
            device: dict[str, int] = {}
            for key, blocks in scores.items():
                address = self._addresses.get(key[0] if isinstance(key, tuple) else key)
                if address is not None:
                    device[address] = blocks
            members = [a for a, m in self._members.items() if m.block_size == block_size]
            # The tiers are looked up by block_hash, whose chain costs a long prompt more
            # than the tree's lookup: only chained when some worker has offloaded blocks.
            offloaded = any(self._lower[address] for address in members)
            block_hashes = chain_block_hashes(tokens_hashes) if offloaded else []
            for address in members:
                held = self._lower[address].extend(block_hashes, device.get(address, 0))
                held[Tier.DEVICE] = device.get(address, 0)
                tokens = {tier: n * block_size for tier, n in held.items() if n > 0}
                if tokens:
                    cached[address] = tokens
        return cached

    def known(self) -> Iterable[str]:
        return self._members.keys()

    def _encode(self, event: KvCacheEvent) -> bytes:
        data: object
        if isinstance(event, BlocksStored):
            data = {
                "stored": {
                    "parent_hash": event.parent_hash,
                    "blocks": [
                        {"block_hash": b.block_hash, "tokens_hash": b.tokens_hash}
                        for b in event.blocks
                    ],
                }
            }
        elif isinstance(event, BlocksRemoved):
            data = {"removed": {"block_hashes": list(event.block_hashes)}}
        else:  # AllCleared
            data = "cleared"
        return json.dumps({"event_id": next(self._event_ids), "data": data}).encode()
