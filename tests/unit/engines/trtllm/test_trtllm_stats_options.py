"""Iteration stats -> EngineStats, engine options parsing, the version pin."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tandem.api.v1alpha1 import PoolRole
from tandem.engines.trtllm import TrtllmEngineOptions, TrtllmOptionsError
from tandem.engines.trtllm.stats import engine_stats_from_iteration, parse_iteration_stats
from tandem.engines.trtllm.version import is_pinned_release, release_of

ITERATION = {
    "iter": 12,
    "numActiveRequests": 7,
    "numQueuedRequests": 3,
    "kvCacheStats": {
        "maxNumBlocks": 1000,
        "freeNumBlocks": 250,
        "usedNumBlocks": 750,
        "tokensPerBlock": 64,
    },
}


def test_iteration_stats_map_onto_engine_stats() -> None:
    stats = engine_stats_from_iteration(ITERATION, kv_block_size=32)
    assert (stats.active_sequences, stats.queued_requests) == (7, 3)
    assert (stats.kv_blocks_total, stats.kv_blocks_free, stats.kv_block_size) == (1000, 250, 64)
    assert stats.kv_utilization == pytest.approx(0.75)


def test_free_blocks_derive_from_used_when_missing() -> None:
    kv = {"maxNumBlocks": 100, "usedNumBlocks": 40}
    stats = engine_stats_from_iteration({"kvCacheStats": kv}, kv_block_size=32)
    assert (stats.kv_blocks_free, stats.kv_block_size, stats.active_sequences) == (60, 32, 0)


@pytest.mark.parametrize(
    "item",
    [
        {},
        {"kvCacheStats": "n/a"},
        {"numActiveRequests": True, "kvCacheStats": {"maxNumBlocks": -4}},
    ],
)
def test_malformed_stats_degrade_to_zeros(item: dict[str, Any]) -> None:
    stats = engine_stats_from_iteration(item, kv_block_size=16)
    assert (stats.active_sequences, stats.kv_blocks_total, stats.kv_utilization) == (0, 0, 0.0)


def test_stats_items_may_arrive_as_json_text() -> None:
    assert parse_iteration_stats(json.dumps(ITERATION)) == ITERATION
    assert parse_iteration_stats("{not json") is None
    assert parse_iteration_stats(42) is None


def test_options_default_from_the_rendered_args_and_known_model() -> None:
    options = TrtllmEngineOptions.from_options(
        {
            "model": "/models/gpt-oss-20b",
            "role": "decode",
            "llm_args": {"max_seq_len": 36864, "kv_cache_config": {"tokens_per_block": 64}},
        }
    )
    assert options.role is PoolRole.DECODE
    assert (options.vocab_size, options.eos_token_id) == (201_088, 200_002)
    assert (options.max_context, options.kv_block_size) == (36864, 64)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"role": "decode"}, "`model`"),
        ({"model": "/m/gpt-oss-20b", "role": "router"}, "`role` must be prefill or decode"),
        ({"model": "/m/gpt-oss-20b", "role": "decode", "kv_cache_config": {}}, "go under llm_args"),
        ({"model": "/m/custom", "role": "decode"}, "`vocab_size` is required"),
        ({"model": "/m/gpt-oss-20b", "role": "decode", "llm_args": []}, "must be a mapping"),
        ({"model": "/m/gpt-oss-20b", "role": "decode", "request_timeout_s": 0}, "positive number"),
    ],
)
def test_bad_options_are_named(options: dict[str, object], message: str) -> None:
    with pytest.raises(TrtllmOptionsError, match=message):
        TrtllmEngineOptions.from_options(options)


@pytest.mark.parametrize(
    ("version", "pinned"),
    [
        ("1.2.1", True),
        ("1.2.1.post2", True),
        ("1.2.1rc3", False),
        ("1.3.0rc9", False),
        ("1.2", False),
    ],
)
def test_pinned_release_detection(version: str, pinned: bool) -> None:
    assert is_pinned_release(version) is pinned


def test_release_of_parses_prefixes() -> None:
    assert release_of("1.3.0rc9") == (1, 3, 0)
    assert release_of("dev") is None
