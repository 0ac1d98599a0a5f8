"""TensorRT-LLM's KV cache events -> Tandem's (``tandem.kv.events``), pure.

TensorRT-LLM 1.2.1 reports its reusable blocks through the LLM API:
``LLM.get_kv_cache_events_async(timeout=2)`` (an async iterable of event dicts,
``tensorrt_llm/llmapi/llm.py``, status "beta"; the synchronous
``get_kv_cache_events(timeout=2)`` returns a list), enabled by
``KvCacheConfig(enable_block_reuse=True, event_buffer_max_size=N > 0)``. Each event is
the dict ``KVCacheEventSerializer`` (``tensorrt_llm/_utils.py``; the same shape from
1.0.0rc4, commit 000a01de66f0, to the 1.3/1.4 docs) writes::

    {"event_id": 7, "window_size": 4096, ["attention_dp_rank": 0,]
     "data": {"type": "created", "num_blocks_per_cache_level": [...]}
           | {"type": "stored", "parent_hash": H | None,
              "blocks": [{"type": "stored_block", "block_hash": H,
                          "tokens": [{"type": "unique_token", "token_id": T,
                                      "token_extra_id": E}, ...],
                          "cache_level": L, "priority": P}, ...]}
           | {"type": "removed", "block_hashes": [H, ...]}
           | {"type": "updated", "block_hash": H, "cache_level": {...}, "priority": {...}}}

**Block names.** TensorRT-LLM's ``block_hash`` comes from its C++ block key hasher over
the block's tokens, extra ids, LoRA id and parent -- an implementation detail of a given
release that a router cannot reproduce from a prompt. But every stored block carries
its tokens, so each one is renamed here with Tandem's own scheme
(``tandem.kv.block_hashes``: Dynamo's ``compute_block_hash_for_seq`` for its tokens,
chained with its parent's Tandem name), which is exactly what a router computes from a
prompt. The translator remembers TensorRT-LLM hash -> Tandem name, to name a later
block's parent and to translate ``removed`` events. A block whose parent it never saw
(events lost to a full ``event_buffer_max_size``) cannot be named and is skipped; so are
sliding-window pools (``window_size`` below the model's full context: their blocks do
not stay a reusable prefix) and ``created`` (pool sizes).

**Tiers.** With a host tier (``kv_cache_config.host_cache_size``) TensorRT-LLM moves
blocks between its primary (GPU) and secondary (host) pools and says so with
``updated`` events whose ``cache_level`` is an ``event_diff`` (``{"type": "event_diff",
"old_value": O, "new_value": N}``; level 0 is primary, 1 secondary: ``getCacheLevel`` in
``cpp/tensorrt_llm/batch_manager/evictionPolicy.cpp``). Each becomes what the reference
engine's tiers report: removed from the old tier, stored in the new one. ``removed``
names the tier the block was last in. Newly stored blocks are computed into the primary
pool. ``updated`` events that change only the priority are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tandem.kv.block_hashes import ROOT, BlockName, chain_block_hash, compute_tokens_hashes
from tandem.kv.events import BlocksRemoved, BlocksStored, KvCacheEvent, Tier

# TensorRT-LLM's cache levels (0: primary, GPU; 1: secondary, host) as Tandem's tiers.
TIER_OF_CACHE_LEVEL = {0: Tier.DEVICE, 1: Tier.HOST}


@dataclass(slots=True)
class TranslationCounts:
    stored: int = 0
    removed: int = 0
    skipped: int = 0  # events or blocks that could not be named or do not describe a prefix


class TrtllmKvEventTranslator:
    """Stateful: one per engine, fed events in TensorRT-LLM's order."""

    def __init__(self, block_size: int, full_window: int) -> None:
        self._block_size = block_size
        self._full_window = full_window
        # TensorRT-LLM block_hash -> (the Tandem block_hash of its parent, its Tandem
        # name, the tier it is in).
        self._blocks: dict[int, tuple[int | None, BlockName, Tier]] = {}
        self.counts = TranslationCounts()

    def translate(self, events: Iterable[Mapping[str, Any]]) -> list[KvCacheEvent]:
        out: list[KvCacheEvent] = []
        for event in events:
            window = event.get("window_size")
            data = event.get("data") or {}
            if isinstance(window, int) and window < self._full_window:
                self.counts.skipped += 1
                continue
            kind = data.get("type")
            if kind == "stored":
                stored = self._stored(data)
                if stored is not None:
                    out.append(stored)
            elif kind == "removed":
                out += self._removed(data)
            elif kind == "updated":
                out += self._updated(data)
            elif kind != "created":
                self.counts.skipped += 1
        return out

    def _stored(self, data: Mapping[str, Any]) -> BlocksStored | None:
        trt_parent = data.get("parent_hash")
        if trt_parent is None:
            parent: int | None = None
        elif trt_parent in self._blocks:
            parent = self._blocks[trt_parent][1].block_hash
        else:
            self.counts.skipped += 1  # its prefix was never reported: unnameable
            return None
        names: list[BlockName] = []
        previous = parent
        for block in data.get("blocks") or ():
            tokens = [int(t["token_id"]) for t in block.get("tokens") or ()]
            if len(tokens) != self._block_size:
                self.counts.skipped += 1
                break  # a partial block ends what can be shared
            (tokens_hash,) = compute_tokens_hashes(tokens, self._block_size)
            chain = ROOT if previous is None else previous
            name = BlockName(chain_block_hash(chain, tokens_hash), tokens_hash)
            self._blocks[int(block["block_hash"])] = (previous, name, Tier.DEVICE)
            previous = name.block_hash
            names.append(name)
        if not names:
            return None
        self.counts.stored += len(names)
        return BlocksStored(parent, tuple(names))

    def _removed(self, data: Mapping[str, Any]) -> list[BlocksRemoved]:
        gone = [
            self._blocks.pop(int(h)) for h in data.get("block_hashes") or () if h in self._blocks
        ]
        self.counts.removed += len(gone)
        by_tier: dict[Tier, list[int]] = {}
        for _, name, tier in gone:
            by_tier.setdefault(tier, []).append(name.block_hash)
        return [BlocksRemoved(tuple(hashes), tier) for tier, hashes in by_tier.items()]

    def _updated(self, data: Mapping[str, Any]) -> list[KvCacheEvent]:
        """A block moved between the GPU and host pools: removed from one tier, stored
        in the other (nothing for a priority change or a block never named)."""
        diff = data.get("cache_level")
        if not isinstance(diff, Mapping):
            return []
        known = self._blocks.get(int(data.get("block_hash", -1)))
        old = TIER_OF_CACHE_LEVEL.get(diff.get("old_value", -1))
        new = TIER_OF_CACHE_LEVEL.get(diff.get("new_value", -1))
        if known is None or old is None or new is None or old is new:
            self.counts.skipped += 1
            return []
        parent, name, tier = known
        self._blocks[int(data["block_hash"])] = (parent, name, new)
        return [BlocksRemoved((name.block_hash,), tier), BlocksStored(parent, (name,), new)]
