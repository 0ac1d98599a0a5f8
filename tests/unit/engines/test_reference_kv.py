"""KV arithmetic, the paged pool's accounting, and what prefill/reserve lay out."""

from __future__ import annotations

import ctypes
import mmap
import sys
from collections.abc import Callable

import numpy as np
import pytest

from tandem.engines.base import KvCapacityError, SamplingParams
from tandem.engines.reference import ReferenceEngine, ReferenceModelConfig, compute_kv_bytes
from tandem.engines.reference.kv_layout import (
    compute_block_span,
    compute_kept_blocks,
    compute_kept_range,
    compute_prefill_peak_blocks,
)
from tandem.engines.reference.kv_pool import KvPool

TinyConfigFactory = Callable[..., ReferenceModelConfig]
GREEDY = SamplingParams(max_tokens=64)


def _prompt(length: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(length).integers(0, 256, length)]


@pytest.mark.parametrize(
    ("num_tokens", "kept_by_layer"),
    [(0, [0, 0]), (1, [1, 1]), (24, [24, 24]), (25, [24, 25]), (1000, [24, 1000])],
)
def test_kept_tokens_full_versus_window(
    tiny_config: TinyConfigFactory, num_tokens: int, kept_by_layer: list[int]
) -> None:
    config = tiny_config()  # window 24; layer 0 slides, layer 1 is full
    kept = [len(compute_kept_range(config, layer, num_tokens)) for layer in range(2)]
    assert kept == kept_by_layer
    token_bytes = 2 * config.num_kv_heads * config.head_dim * 4
    assert compute_kv_bytes(config, num_tokens) == sum(kept_by_layer) * token_bytes


def test_gpt_oss_120b_sized_kv_matches_published_figure() -> None:
    """36 layers, 8 KV heads of 64, window 128: 32k tokens in fp32 is twice the bf16
    figure in stack-facts (1,212,678,144 B)."""
    config = ReferenceModelConfig(
        num_layers=36,
        num_heads=64,
        num_kv_heads=8,
        head_dim=64,
        hidden=64,
        intermediate=8,
        vocab_size=300,
        num_kv_blocks=1,
    )
    assert compute_kv_bytes(config, 32_768) == 2 * 1_212_678_144


@pytest.mark.parametrize(
    ("positions", "blocks"),
    [
        (range(0), range(0)),
        (range(0, 1), range(0, 1)),
        (range(7, 9), range(0, 2)),
        (range(8, 16), range(1, 2)),
        (range(9, 33), range(1, 5)),
    ],
)
def test_block_span(positions: range, blocks: range) -> None:
    assert compute_block_span(positions, 8) == blocks


def test_pool_allocates_lowest_first_and_accounts() -> None:
    pool = KvPool(
        ReferenceModelConfig(num_kv_blocks=10, hidden=32, num_heads=2, num_kv_heads=1, head_dim=16)
    )
    first = pool.allocate(3)
    assert first == [0, 1, 2]
    assert pool.num_free == 7
    with pytest.raises(KvCapacityError, match="need 8 blocks, 7 of 10 free"):
        pool.allocate(8)
    assert pool.num_free == 7
    pool.decref(first[::-1])  # as a sequence releases: its last block first
    assert pool.num_free == 10
    assert pool.allocate(10) == list(range(10))


def _resident_fraction(array: np.ndarray) -> float:
    """Share of ``array``'s pages in memory (mincore(2))."""
    start = array.ctypes.data // mmap.PAGESIZE * mmap.PAGESIZE
    length = array.ctypes.data + array.nbytes - start
    pages = -(-length // mmap.PAGESIZE)
    resident = (ctypes.c_ubyte * pages)()
    mincore = ctypes.CDLL(None, use_errno=True).mincore
    mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    assert mincore(start, length, resident) == 0, ctypes.get_errno()
    return sum(flag & 1 for flag in resident) / pages


@pytest.mark.skipif(sys.platform != "linux", reason="mincore(2) as Linux defines it")
def test_pool_is_resident_from_the_start() -> None:
    """The pool's memory is taken when the engine starts, not block by block as the
    prefix cache fills it (a worker's RSS grew for minutes into the soak)."""
    pool = KvPool(ReferenceModelConfig(num_kv_blocks=8192))  # 64 MiB: mapped on its own
    assert pool.blocks.nbytes == 64 << 20
    assert _resident_fraction(pool.blocks) == 1.0
    assert not pool.blocks.any()


def test_region_is_one_contiguous_buffer_of_all_blocks(tiny_config: TinyConfigFactory) -> None:
    engine = ReferenceEngine(tiny_config())
    (region,) = engine.kv_regions()
    assert region.nbytes == engine.config.num_kv_blocks * engine.config.kv_block_bytes
    assert not region.readonly and region.contiguous


@pytest.mark.parametrize("length", [1, 7, 8, 9, 23, 24, 25, 39, 40, 41, 64, 65, 100, 257])
def test_prefill_layout_is_exact(tiny_config: TinyConfigFactory, length: int) -> None:
    engine = ReferenceEngine(tiny_config())
    config = engine.config
    result = engine.prefill("r", _prompt(length), GREEDY)
    layout = result.kv
    assert layout.num_tokens == length == result.num_prompt_tokens
    assert layout.nbytes == compute_kv_bytes(config, length)
    region_bytes = engine.kv_regions()[0].nbytes
    for r in layout.ranges:
        assert r.region == 0
        assert 0 < r.length <= config.kv_block_bytes
        assert r.length % config.kv_token_bytes == 0
        assert r.offset % config.kv_token_bytes == 0
        # a range never crosses a block boundary
        assert (
            r.offset // config.kv_block_bytes == (r.offset + r.length - 1) // config.kv_block_bytes
        )
        assert r.offset + r.length <= region_bytes
    expected_ranges = sum(len(compute_kept_blocks(config, layer, length)) for layer in range(2))
    assert len(layout.ranges) == expected_ranges
    held = config.num_kv_blocks - engine.stats().kv_blocks_free
    assert held == expected_ranges  # one range per held block: no stale block kept


@pytest.mark.parametrize("length", [1, 9, 24, 25, 41, 100, 257])
def test_reserve_layout_pairs_with_prefill_layout(
    tiny_config: TinyConfigFactory, length: int
) -> None:
    prefill_engine = ReferenceEngine(tiny_config())
    decode_engine = ReferenceEngine(tiny_config())
    decode_engine.reserve("other", _prompt(13), 1)  # so physical blocks differ
    prompt = _prompt(length)
    sent = prefill_engine.prefill("r", prompt, GREEDY).kv
    received = decode_engine.reserve("r", prompt, 5)
    assert [r.length for r in received.ranges] == [r.length for r in sent.ranges]
    assert received.num_tokens == sent.num_tokens
    assert {r.offset for r in received.ranges}.isdisjoint(
        {r.offset for r in decode_engine.reserve("third", prompt, 5).ranges}
    )


def test_window_layers_stay_bounded_while_decoding(tiny_config: TinyConfigFactory) -> None:
    engine = ReferenceEngine(tiny_config(max_context=4096))
    config = engine.config
    engine.prefill("r", _prompt(50), SamplingParams(max_tokens=400))
    params = {"r": SamplingParams(max_tokens=400)}
    window_limit = config.sliding_window // config.kv_block_size + 1
    for step in range(150):
        engine.step(params)
        cached_tokens = 50 + step + 1
        full_blocks = len(compute_kept_blocks(config, 1, cached_tokens))
        held = config.num_kv_blocks - engine.stats().kv_blocks_free
        assert held - full_blocks <= window_limit
    held = config.num_kv_blocks - engine.stats().kv_blocks_free
    cached_tokens = 50 + 150
    expected = sum(len(compute_kept_blocks(config, layer, cached_tokens)) for layer in range(2))
    assert held == expected


def test_prefill_peak_accounts_for_the_window_overlap(tiny_config: TinyConfigFactory) -> None:
    config = tiny_config()  # chunks of at most 40, window 24, block 8
    # Chunks may end anywhere (the step budget decides); the worst for 83 tokens is the
    # chunk [43, 83): the window layer holds [19, 83) -> blocks 2..10 (9), the full layer
    # 0..10 (11). Chunk [40, 80) would hold 8 + 10.
    assert compute_prefill_peak_blocks(config, 83) == 9 + 11
    # a single chunk holds everything it computes
    assert compute_prefill_peak_blocks(config, 40) == 5 + 5


def test_prefill_fits_exactly_its_peak_and_fails_cleanly_below(
    tiny_config: TinyConfigFactory,
) -> None:
    length = 300
    peak = compute_prefill_peak_blocks(tiny_config(), length)
    fits = ReferenceEngine(tiny_config(num_kv_blocks=peak))
    fits.prefill("r", _prompt(length), GREEDY)
    too_small = ReferenceEngine(tiny_config(num_kv_blocks=peak - 1))
    with pytest.raises(KvCapacityError, match="needs"):
        too_small.prefill("r", _prompt(length), GREEDY)
    stats = too_small.stats()
    assert stats.kv_blocks_free == stats.kv_blocks_total == peak - 1
    assert stats.active_sequences == 0
    # A window-only pool (no per-layer copy of 300 tokens) suffices: far below 2 x 38.
    assert peak < 2 * (length // 8 + 1)


def test_reserve_capacity_error_leaves_pool_untouched(tiny_config: TinyConfigFactory) -> None:
    engine = ReferenceEngine(tiny_config(num_kv_blocks=20))
    with pytest.raises(KvCapacityError):
        engine.reserve("r", _prompt(200), 1)
    assert engine.stats().kv_blocks_free == 20
    engine.reserve("r", _prompt(60), 1)  # window keeps 36..59: blocks 4..7 (4); full 0..7 (8)
    assert engine.stats().kv_blocks_free == 20 - (4 + 8)


def test_release_returns_every_block_and_is_idempotent(tiny_config: TinyConfigFactory) -> None:
    engine = ReferenceEngine(tiny_config())
    total = engine.stats().kv_blocks_total
    engine.prefill("a", _prompt(100), GREEDY)
    engine.reserve("b", _prompt(30), 3)
    engine.step({"a": GREEDY})
    assert engine.stats().kv_blocks_free < total
    for request_id in ("a", "b", "a", "never-seen"):
        engine.release(request_id)
    assert engine.stats().kv_blocks_free == total


def test_stats_count_generating_sequences(tiny_config: TinyConfigFactory) -> None:
    engine = ReferenceEngine(tiny_config())
    engine.prefill("a", _prompt(10), GREEDY)
    engine.prefill("done", _prompt(10), SamplingParams(max_tokens=1))
    engine.reserve("b", _prompt(10), 3)
    stats = engine.stats()
    assert stats.active_sequences == 1
    assert stats.kv_block_size == 8
    engine.commit("b")
    assert engine.stats().active_sequences == 2
    assert 0.0 < engine.stats().kv_utilization < 1.0


def test_step_capacity_error_is_atomic_and_recoverable(tiny_config: TinyConfigFactory) -> None:
    # 16-token prompts fill exactly 2 blocks per layer: 4 blocks per sequence
    engine = ReferenceEngine(tiny_config(num_kv_blocks=8))
    params = SamplingParams(max_tokens=50)
    engine.prefill("a", _prompt(16), params)
    engine.prefill("b", _prompt(16)[::-1], params)  # no shared prefix: no shared blocks
    # 4 + 4 blocks held; position 16 starts a new block in both layers of both
    assert engine.stats().kv_blocks_free == 0
    with pytest.raises(KvCapacityError, match="decode step needs"):
        engine.step({"a": params, "b": params})
    engine.release("b")
    (out,) = engine.step({"a": params})
    assert out.request_id == "a"
