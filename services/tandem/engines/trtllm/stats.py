"""TensorRT-LLM iteration stats -> Tandem's EngineStats (a pure mapping).

``LLM.get_stats_async`` yields one dict per executor iteration when
``enable_iter_perf_stats`` is on; its keys are those of the C++ ``IterationStats`` JSON
(tensorrt_llm/bindings ``IterationStats``, same names since 0.1x): ``numActiveRequests``,
``numQueuedRequests``, and ``kvCacheStats`` with ``maxNumBlocks``, ``freeNumBlocks``,
``usedNumBlocks``, ``tokensPerBlock``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tandem.engines.base import EngineStats


def parse_iteration_stats(item: object) -> Mapping[str, Any] | None:
    """One item of ``get_stats_async`` as a dict (some versions yield JSON strings);
    None for anything unreadable."""
    if isinstance(item, str):
        try:
            item = json.loads(item)
        except json.JSONDecodeError:
            return None
    return item if isinstance(item, Mapping) else None


def engine_stats_from_iteration(stats: Mapping[str, Any], *, kv_block_size: int) -> EngineStats:
    kv = stats.get("kvCacheStats")
    kv = kv if isinstance(kv, Mapping) else {}
    total = _count(kv, "maxNumBlocks")
    free = _count(kv, "freeNumBlocks")
    if free is None and total is not None:
        used = _count(kv, "usedNumBlocks")
        free = total - used if used is not None else None
    return EngineStats(
        active_sequences=_count(stats, "numActiveRequests") or 0,
        kv_blocks_total=total or 0,
        kv_blocks_free=min(free or 0, total or 0),
        kv_block_size=_count(kv, "tokensPerBlock") or kv_block_size,
        queued_requests=_count(stats, "numQueuedRequests") or 0,
    )


def _count(source: Mapping[str, Any], key: str) -> int | None:
    value = source.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return max(0, int(value))
