"""The reference engine's prefix cache: shared prompt prefixes are computed once, the KV
events name exactly what is cached, eviction is least-recently-used from chain tails,
sliding-window layers keep only their window, and reuse never changes a token."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tandem.engines.base import SamplingParams
from tandem.engines.reference import ReferenceEngine, ReferenceModelConfig
from tandem.engines.reference.kv_layout import compute_kept_blocks
from tandem.kv.block_hashes import compute_block_names
from tandem.kv.events import BlocksRemoved, BlocksStored, KvCacheState

from .conftest import generate as generate_answer

TinyConfigFactory = Callable[..., ReferenceModelConfig]
CopyKv = Callable[..., None]
GREEDY = SamplingParams(max_tokens=6)
BLOCK = 8  # the tiny configs' kv_block_size


def tokens_of(length: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(0, 256, length).tolist()


def generate(
    engine: ReferenceEngine, request_id: str, prompt: list[int], params: SamplingParams = GREEDY
) -> list[int]:
    """The answer, its sequence kept (finished sequences hold their KV until released)."""
    return generate_answer(engine, request_id, prompt, params, release=False)


def fresh_tokens(
    config: ReferenceModelConfig, prompt: list[int], params: SamplingParams = GREEDY
) -> list[int]:
    return generate(ReferenceEngine(config), "alone", prompt, params)


def cached_hashes(engine: ReferenceEngine) -> set[int]:
    assert engine.cache is not None
    return set(engine.cache)


def test_a_shared_prefix_is_computed_once(tiny_config: TinyConfigFactory) -> None:
    config = tiny_config(sliding_window=0)
    engine = ReferenceEngine(config)
    system = tokens_of(50, 1)
    first, second = system + tokens_of(13, 2), system + tokens_of(21, 3)
    generate(engine, "a", first)
    engine.release("a")
    assert engine.stats().prompt_tokens_computed == len(first)
    assert generate(engine, "b", second) == fresh_tokens(config, second)
    stats = engine.stats()
    assert stats.prompt_tokens_cached == 48  # the 6 full blocks of the 50 shared tokens
    assert stats.prompt_tokens_computed == len(first) + len(second) - 48


def test_a_fully_cached_prompt_still_computes_its_last_token(
    tiny_config: TinyConfigFactory,
) -> None:
    config = tiny_config(sliding_window=0)
    engine = ReferenceEngine(config)
    prompt = tokens_of(32, 4)  # exactly 4 blocks
    generate(engine, "a", prompt)
    engine.release("a")
    assert generate(engine, "b", prompt) == fresh_tokens(config, prompt)
    assert engine.stats().prompt_tokens_cached == 24  # 3 blocks; the 4th holds the last token


def test_events_name_exactly_what_the_cache_holds(tiny_config: TinyConfigFactory) -> None:
    """Under eviction pressure, the state rebuilt from the events is always the engine's
    cache, prefix-closed (every block reachable from a prompt's start)."""
    engine = ReferenceEngine(tiny_config(num_kv_blocks=120))
    state = KvCacheState()
    system = tokens_of(40, 5)
    events = []
    for index in range(30):
        prompt = (system if index % 3 else []) + tokens_of(int(10 + 7 * (index % 5)), 100 + index)
        generate(engine, f"r{index}", prompt, SamplingParams(max_tokens=3))
        engine.release(f"r{index}")
        batch = engine.drain_kv_events()
        events += batch
        for event in batch:
            state.apply(event)
        assert set(state) == cached_hashes(engine)
        assert len(state.snapshot()) == len(state)
    assert any(isinstance(e, BlocksRemoved) for e in events)
    stored = [e for e in events if isinstance(e, BlocksStored)]
    first_prompt = tokens_of(10, 100)
    assert stored[0] == BlocksStored(None, tuple(compute_block_names(first_prompt, BLOCK)))


def test_generated_blocks_are_cached_too(tiny_config: TinyConfigFactory) -> None:
    """A multi-turn conversation's next prompt starts with the previous answer."""
    config = tiny_config(sliding_window=0)
    engine = ReferenceEngine(config)
    prompt = tokens_of(20, 6)
    answer = generate(engine, "turn1", prompt, SamplingParams(max_tokens=30))
    engine.release("turn1")
    follow_up = prompt + answer + tokens_of(9, 7)
    assert generate(engine, "turn2", follow_up) == fresh_tokens(config, follow_up)
    # prompt + answer = 50 tokens; 49 have KV (the last answer token never ran): 6 blocks.
    assert engine.stats().prompt_tokens_cached == 48


def test_least_recently_used_prefix_is_evicted_first(tiny_config: TinyConfigFactory) -> None:
    config = tiny_config(sliding_window=0, num_kv_blocks=44)  # 2 layers: 22 blocks a layer
    engine = ReferenceEngine(config)
    a, b, c = tokens_of(64, 10), tokens_of(64, 11), tokens_of(64, 12)
    for name, prompt in (("a", a), ("b", b), ("a2", a)):  # a is used again, after b
        generate(engine, name, prompt, SamplingParams(max_tokens=1))
        engine.release(name)
    generate(engine, "c", c, SamplingParams(max_tokens=1))  # needs room: b goes, a stays
    engine.release("c")
    before = engine.stats().prompt_tokens_cached
    generate(engine, "a3", a, SamplingParams(max_tokens=1))
    assert engine.stats().prompt_tokens_cached - before == 56
    before = engine.stats().prompt_tokens_cached
    generate(engine, "b2", b, SamplingParams(max_tokens=1))
    assert engine.stats().prompt_tokens_cached - before < 56


def test_shared_blocks_outlive_one_sharer(tiny_config: TinyConfigFactory) -> None:
    """Two running sequences share a prefix; one leaves and the pool is squeezed: the
    other's blocks are never handed out, and it decodes exactly as alone."""
    config = tiny_config(sliding_window=0, num_kv_blocks=80)
    engine = ReferenceEngine(config)
    system = tokens_of(64, 20)
    params = SamplingParams(max_tokens=20)
    one, two = [*system, 1, 2, 3], [*system, 4, 5, 6]
    engine.prefill("one", one, params)
    engine.prefill("two", two, params)
    engine.release("one")
    for index in range(6):  # pressure: evictions
        generate(engine, f"filler{index}", tokens_of(60, 30 + index), SamplingParams(max_tokens=1))
        engine.release(f"filler{index}")
    tokens = []
    for _ in range(19):
        (out,) = engine.step({"two": params})
        tokens.append(out.token)
    assert tokens == fresh_tokens(config, two, params)[1:]


def test_window_layers_keep_only_their_window(tiny_config: TinyConfigFactory) -> None:
    """A window layer's blocks that fell out of its window are released by the sequence
    (free, only named by the cache), while the full layer keeps every block."""
    config = tiny_config()  # window 24, blocks of 8; layer 0 slides
    engine = ReferenceEngine(config)
    prompt = tokens_of(100, 40)
    params = SamplingParams(max_tokens=40)
    generate(engine, "r", prompt, params)  # holds 139 tokens of KV, not released
    sequence_kv = engine._sequences["r"].kv
    window_blocks = compute_kept_blocks(config, 0, 139)
    full_blocks = compute_kept_blocks(config, 1, 139)
    assert [sequence_kv.block(0, j) is not None for j in range(18)] == [
        j in window_blocks for j in range(18)
    ]
    assert all(sequence_kv.block(1, j) is not None for j in full_blocks)
    assert engine.stats().kv_blocks_free == config.num_kv_blocks - len(window_blocks) - len(
        full_blocks
    )
    # The cache still names the window layer's old blocks (free, evictable).
    assert engine.pool.num_cached_free >= 17 - len(window_blocks)


def test_reuse_with_window_layers_gives_identical_tokens(tiny_config: TinyConfigFactory) -> None:
    config = tiny_config()
    engine = ReferenceEngine(config)
    system = tokens_of(120, 41)  # 5 windows
    generate(engine, "a", system + tokens_of(30, 42), SamplingParams(max_tokens=40))
    engine.release("a")
    prompt = system + tokens_of(17, 43)
    assert generate(engine, "b", prompt) == fresh_tokens(config, prompt)
    assert engine.stats().prompt_tokens_cached == 120
    # b holds the reused full-layer blocks and only the window layer's last window of them
    held = engine._sequences["b"].kv
    assert held.block(0, 0) is None and held.block(1, 0) is not None


def test_an_evicted_window_block_is_never_shared(tiny_config: TinyConfigFactory) -> None:
    """Squeeze the pool until the window layer's old blocks are handed out again: the
    entries naming them go (with everything after them), a later prompt with the same
    prefix reuses only what is still intact, and its tokens are unchanged."""
    config = tiny_config(num_kv_blocks=64)
    engine = ReferenceEngine(config)
    system = tokens_of(120, 50)
    generate(engine, "a", [*system, 9, 9], SamplingParams(max_tokens=2))
    engine.release("a")
    engine.drain_kv_events()
    generate(engine, "squeeze", tokens_of(150, 51), SamplingParams(max_tokens=2))
    engine.release("squeeze")
    removed = [
        h for e in engine.drain_kv_events() if isinstance(e, BlocksRemoved) for h in e.block_hashes
    ]
    assert removed
    names = compute_block_names(system, BLOCK)
    still = cached_hashes(engine)
    kept = 0
    while kept < len(names) and names[kept].block_hash in still:
        kept += 1
    assert all(name.block_hash not in still for name in names[kept:])  # prefix-closed
    assert 0 < kept < len(names)  # the squeeze took the tail of the chain, not all of it
    before = engine.stats().prompt_tokens_cached
    prompt = [*system, 7, 7, 7]
    assert generate(engine, "b", prompt) == fresh_tokens(config, prompt)
    assert engine.stats().prompt_tokens_cached - before == kept * BLOCK


def test_received_kv_is_cached_on_the_decode_engine(
    tiny_config: TinyConfigFactory, copy_kv: CopyKv
) -> None:
    """Blocks a decode engine received over a KV transfer serve a later local prefill."""
    config = tiny_config(sliding_window=0)
    prefill, decode = ReferenceEngine(config), ReferenceEngine(config)
    prompt = tokens_of(70, 60)
    result = prefill.prefill("r", prompt, GREEDY)
    layout = decode.reserve("r", prompt, result.first_token)
    copy_kv(prefill, result.kv, decode, layout)
    assert decode.drain_kv_events() == []  # nothing is named before the bytes are in
    decode.commit("r")
    (stored,) = decode.drain_kv_events()
    assert stored == BlocksStored(None, tuple(compute_block_names(prompt, BLOCK)))
    decode.release("r")
    follow = prompt[:64] + tokens_of(5, 61)
    assert generate(decode, "local", follow) == fresh_tokens(config, follow)
    assert decode.stats().prompt_tokens_cached == 64


def test_received_kv_of_a_window_model_is_not_cached_past_the_window(
    tiny_config: TinyConfigFactory, copy_kv: CopyKv
) -> None:
    """The transfer carries only the last window of a window layer: the earlier blocks
    are incomplete here, so nothing from the start of the prompt can be named."""
    config = tiny_config()
    prefill, decode = ReferenceEngine(config), ReferenceEngine(config)
    prompt = tokens_of(70, 62)
    result = prefill.prefill("r", prompt, GREEDY)
    layout = decode.reserve("r", prompt, result.first_token)
    copy_kv(prefill, result.kv, decode, layout)
    decode.commit("r")
    assert decode.drain_kv_events() == []
    assert len(decode.cache or ()) == 0


def test_prefix_cache_off(tiny_config: TinyConfigFactory) -> None:
    engine = ReferenceEngine(tiny_config(prefix_cache=False))
    prompt = tokens_of(40, 70)
    for name in ("a", "b"):
        generate(engine, name, prompt)
        engine.release(name)
    assert engine.drain_kv_events() == []
    assert engine.stats().prompt_tokens_cached == 0
    assert engine.stats().kv_blocks_free == engine.stats().kv_blocks_total


@pytest.mark.parametrize("experts", [0, 4])
def test_concurrent_identical_prompts_share_nothing_until_cached(
    tiny_config: TinyConfigFactory, experts: int
) -> None:
    """Two identical prompts prefilled in the same steps compute their own blocks; the
    cache keeps one copy, and both get the same tokens."""
    config = tiny_config(num_experts=experts, sliding_window=0)
    engine = ReferenceEngine(config)
    prompt = tokens_of(45, 80)
    engine.start_prefill("x", prompt, GREEDY)
    engine.start_prefill("y", prompt, GREEDY)
    firsts = {}
    while len(firsts) < 2:
        for out in engine.step({}):
            firsts[out.request_id] = out.token
    assert firsts["x"] == firsts["y"] == fresh_tokens(config, prompt)[0]
    assert len(cached_hashes(engine)) == 5
