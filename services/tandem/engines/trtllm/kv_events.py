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
not stay a reusable prefix), ``created`` (pool sizes) and ``updated`` (priority or cache
level moves; an offloaded block is still reusable).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tandem.kv.block_hashes import ROOT, BlockName, chain_block_hash, compute_tokens_hashes
from tandem.kv.events import BlocksRemoved, BlocksStored, KvCacheEvent


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
        self._names: dict[int, int] = {}  # TensorRT-LLM block_hash -> Tandem block_hash
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
                removed = self._removed(data)
                if removed is not None:
                    out.append(removed)
            elif kind not in ("created", "updated"):
                self.counts.skipped += 1
        return out

    def _stored(self, data: Mapping[str, Any]) -> BlocksStored | None:
        trt_parent = data.get("parent_hash")
        if trt_parent is None:
            parent: int | None = None
        elif trt_parent in self._names:
            parent = self._names[trt_parent]
        else:
            self.counts.skipped += 1  # its prefix was never reported: unnameable
            return None
        names: list[BlockName] = []
        chain = ROOT if parent is None else parent
        for block in data.get("blocks") or ():
            tokens = [int(t["token_id"]) for t in block.get("tokens") or ()]
            if len(tokens) != self._block_size:
                self.counts.skipped += 1
                break  # a partial block ends what can be shared
            (tokens_hash,) = compute_tokens_hashes(tokens, self._block_size)
            chain = chain_block_hash(chain, tokens_hash)
            self._names[int(block["block_hash"])] = chain
            names.append(BlockName(chain, tokens_hash))
        if not names:
            return None
        self.counts.stored += len(names)
        return BlocksStored(parent, tuple(names))

    def _removed(self, data: Mapping[str, Any]) -> BlocksRemoved | None:
        ours = [self._names.pop(int(h)) for h in data.get("block_hashes") or () if h in self._names]
        if not ours:
            return None
        self.counts.removed += len(ours)
        return BlocksRemoved(tuple(ours))
