"""TensorRT-LLM's KV cache events through Tandem's seam: blocks renamed with Tandem's
hashes from the tokens TensorRT-LLM reports, so a router matches prompts against them.

The fake emits events in TensorRT-LLM's documented shape (``KVCacheEventSerializer``,
tensorrt_llm/_utils.py) with its own block hashes, never Tandem's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tandem.api.validate import load_inference_cluster
from tandem.engines.base import SamplingParams
from tandem.engines.trtllm import TrtllmEngine, TrtllmEngineOptions, render_trtllm_config
from tandem.engines.trtllm.kv_events import TrtllmKvEventTranslator
from tandem.kv.block_hashes import compute_block_names
from tandem.kv.events import BlocksRemoved, BlocksStored, KvCacheState, Tier

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = ROOT / "manifests" / "examples" / "gpt-oss-120b-gb200.yaml"
BLOCK = 32


def stored(parent: int | None, blocks: list[tuple[int, list[int]]], window: int = 4096) -> Any:
    return {
        "event_id": 1,
        "window_size": window,
        "data": {
            "type": "stored",
            "parent_hash": parent,
            "blocks": [
                {
                    "type": "stored_block",
                    "block_hash": h,
                    "tokens": [{"type": "unique_token", "token_id": t, "token_extra_id": 0}
                               for t in tokens],
                    "cache_level": 0,
                    "priority": 35,
                }
                for h, tokens in blocks
            ],
        },
    }  # fmt: skip


def test_translation_names_blocks_as_a_router_names_prompts() -> None:
    prompt = list(range(100, 100 + 3 * BLOCK))
    names = compute_block_names(prompt, BLOCK)
    chunks = [prompt[i : i + BLOCK] for i in range(0, len(prompt), BLOCK)]
    translator = TrtllmKvEventTranslator(BLOCK, full_window=4096)
    first = translator.translate([stored(None, [(901, chunks[0]), (902, chunks[1])])])
    later = translator.translate([stored(902, [(903, chunks[2])])])
    assert first == [BlocksStored(None, tuple(names[:2]))]
    assert later == [BlocksStored(names[1].block_hash, (names[2],))]
    removed = translator.translate(
        [{"event_id": 3, "data": {"type": "removed", "block_hashes": [903, 777]}}]
    )
    assert removed == [BlocksRemoved((names[2].block_hash,))]


def test_what_cannot_be_named_is_skipped_not_guessed() -> None:
    translator = TrtllmKvEventTranslator(BLOCK, full_window=4096)
    tokens = list(range(BLOCK))
    events = [
        {"event_id": 0, "data": {"type": "created", "num_blocks_per_cache_level": [9, 0]}},
        stored(555, [(1, tokens)]),  # its parent was never reported (events lost)
        stored(None, [(2, tokens)], window=128),  # a sliding-window pool
        stored(None, [(3, tokens[:5])]),  # not a full block
    ]
    assert translator.translate(events) == []
    assert translator.counts.skipped == 3


def updated(block_hash: int, cache_level: tuple[int, int] | None) -> Any:
    """An ``updated`` event as ``KVCacheEventSerializer._updated_to_json`` writes it."""
    diff = None
    if cache_level is not None:
        old, new = cache_level
        diff = {"type": "event_diff", "new_value": new, "old_value": old}
    priority = {"type": "event_diff", "new_value": 35, "old_value": 35}
    data = {"type": "updated", "block_hash": block_hash, "cache_level": diff, "priority": priority}
    return {"event_id": 5, "window_size": 4096, "data": data}


def test_blocks_moved_to_host_memory_and_back_change_tier() -> None:
    prompt = list(range(100, 100 + 2 * BLOCK))
    names = compute_block_names(prompt, BLOCK)
    translator = TrtllmKvEventTranslator(BLOCK, full_window=4096)
    translator.translate([stored(None, [(901, prompt[:BLOCK]), (902, prompt[BLOCK:])])])
    offloaded = translator.translate([updated(902, (0, 1))])
    assert offloaded == [
        BlocksRemoved((names[1].block_hash,), Tier.DEVICE),
        BlocksStored(names[0].block_hash, (names[1],), Tier.HOST),
    ]
    # Removed from host memory: the tier it is in now.
    removed = translator.translate(
        [{"event_id": 6, "data": {"type": "removed", "block_hashes": [901, 902]}}]
    )
    assert removed == [
        BlocksRemoved((names[0].block_hash,), Tier.DEVICE),
        BlocksRemoved((names[1].block_hash,), Tier.HOST),
    ]


def test_onboarded_blocks_return_to_the_device_tier() -> None:
    prompt = list(range(BLOCK))
    (name,) = compute_block_names(prompt, BLOCK)
    translator = TrtllmKvEventTranslator(BLOCK, full_window=4096)
    translator.translate([stored(None, [(7, prompt)]), updated(7, (0, 1))])
    assert translator.translate([updated(7, (1, 0))]) == [
        BlocksRemoved((name.block_hash,), Tier.HOST),
        BlocksStored(None, (name,), Tier.DEVICE),
    ]


def test_priority_changes_and_unknown_blocks_move_nothing() -> None:
    translator = TrtllmKvEventTranslator(BLOCK, full_window=4096)
    translator.translate([stored(None, [(7, list(range(BLOCK)))])])
    events = [updated(7, None), updated(8, (0, 1)), updated(7, (0, 2))]
    assert translator.translate(events) == []


@pytest.fixture
async def engine(fake_trtllm: ModuleType) -> AsyncIterator[TrtllmEngine]:
    llm_args = render_trtllm_config(load_inference_cluster(EXAMPLE), "decode")
    llm_args["kv_cache_config"] = {**llm_args["kv_cache_config"], "max_tokens": 8 * BLOCK}
    options = {"model": "/models/gpt-oss-120b", "role": "decode", "llm_args": llm_args}
    engine = TrtllmEngine(TrtllmEngineOptions.from_options(options))
    await engine.start()
    yield engine
    await engine.close()


async def run(engine: TrtllmEngine, request_id: str, prompt: list[int]) -> None:
    async for _ in engine.generate(request_id, prompt, SamplingParams(max_tokens=2)):
        pass


async def test_the_engine_publishes_trtllm_events_under_tandem_names(
    engine: TrtllmEngine,
) -> None:
    state = KvCacheState()
    system = list(range(1000, 1000 + 2 * BLOCK))
    first = [*system, *range(5000, 5000 + BLOCK + 7)]
    await run(engine, "r1", first)
    events = await engine.poll_kv_events()
    for event in events:
        state.apply(event)
    expected = [n.block_hash for n in compute_block_names(first, BLOCK)]
    assert list(state) == expected  # three full blocks; the 7-token tail has no name
    # A second prompt sharing the system prompt stores only its own blocks, chained to
    # the shared ones.
    second = [*system, *range(7000, 7000 + 2 * BLOCK)]
    await run(engine, "r2", second)
    events = await engine.poll_kv_events()
    assert isinstance(events[0], BlocksStored)
    assert events[0].parent_hash == expected[1]
    for event in events:
        state.apply(event)
    # The fake's pool holds 8 blocks; five prompts of three new blocks evict the oldest.
    for n in range(5):
        await run(engine, f"r{n + 3}", list(range(10_000 * (n + 1), 10_000 * (n + 1) + 3 * BLOCK)))
    for event in await engine.poll_kv_events():
        state.apply(event)
    assert len(state) == 8
    assert expected[0] not in set(state)


async def test_without_an_event_buffer_nothing_is_polled(fake_trtllm: ModuleType) -> None:
    llm_args = render_trtllm_config(load_inference_cluster(EXAMPLE), "decode")
    llm_args["kv_cache_config"] = {**llm_args["kv_cache_config"], "event_buffer_max_size": 0}
    options = {"model": "/models/gpt-oss-120b", "role": "decode", "llm_args": llm_args}
    engine = TrtllmEngine(TrtllmEngineOptions.from_options(options))
    await engine.start()
    try:
        await run(engine, "r1", list(range(3 * BLOCK)))
        assert await engine.poll_kv_events() == []
    finally:
        await engine.close()
