"""Long prompts within bounded memory: chunked prefill, tiled attention, windows that
let go of their old blocks."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import numpy as np

from tandem.engines.base import SamplingParams
from tandem.engines.reference import ReferenceEngine, ReferenceModelConfig, compute_kv_bytes
from tandem.engines.reference.kv_layout import compute_kept_blocks, compute_prefill_peak_blocks

TinyConfigFactory = Callable[..., ReferenceModelConfig]
PARAMS = SamplingParams(max_tokens=3)
# A model small enough that 32k tokens take seconds, with the default's chunk and tile.
LONG_OPTIONS: dict[str, object] = {
    "hidden": 32,
    "num_heads": 2,
    "num_kv_heads": 1,
    "head_dim": 16,
    "intermediate": 32,
    "sliding_window": 128,
    "kv_block_size": 16,
    "prefill_chunk": 512,
    "attention_tile": 1024,
}


def _prompt(length: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(length).integers(0, 256, length)]


def _traced_prefill_peak(config: ReferenceModelConfig, length: int) -> int:
    engine = ReferenceEngine(config)
    prompt = _prompt(length)
    tracemalloc.start()
    try:
        engine.prefill("r", prompt, PARAMS)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_prefill_working_memory_grows_linearly_not_quadratically(
    tiny_config: TinyConfigFactory,
) -> None:
    """4x the prompt: a dense score matrix would need 16x the memory; chunked, tiled
    attention stays well under 4x (only the gathered K/V grows with the prompt)."""
    config = tiny_config(**LONG_OPTIONS, num_layers=2, num_kv_blocks=2048)
    short, long = _traced_prefill_peak(config, 2048), _traced_prefill_peak(config, 8192)
    assert long < 4 * short
    heads = config.num_heads
    assert long < heads * 8192 * 8192 * 4 / 8  # far below one dense fp32 score matrix


def test_32k_prompt_in_a_pool_sized_for_full_layers_plus_windows(
    tiny_config: TinyConfigFactory,
) -> None:
    """A window layer and a full layer prefill 32,768 tokens in a pool holding the full
    layer's KV plus what the window needs while a chunk runs, about half of what two
    full layers would take; the layout moves exactly the analytical bytes."""
    length = 32_768
    options = {**LONG_OPTIONS, "num_layers": 2}
    peak = compute_prefill_peak_blocks(tiny_config(**options), length)
    config = tiny_config(**options, num_kv_blocks=peak)
    assert peak < 0.6 * 2 * length / config.kv_block_size
    engine = ReferenceEngine(config)
    result = engine.prefill("r", _prompt(length), PARAMS)
    assert result.kv.nbytes == compute_kv_bytes(config, length)
    held = config.num_kv_blocks - engine.stats().kv_blocks_free
    assert held == sum(len(compute_kept_blocks(config, layer, length)) for layer in range(2))
    (out,) = engine.step({"r": PARAMS})
    assert 0 <= out.token < config.vocab_size


def test_the_default_model_has_room_for_a_32k_prompt() -> None:
    """The default (gpt-oss-shaped) model takes a 32k prompt: its context reaches it and its
    pool holds what the prefill needs at its peak. Running it is the path the tiny model
    above runs in seconds; on the default model it takes about 90 s of one core, which
    proves nothing more."""
    config = ReferenceModelConfig()
    assert config.max_context >= 32_768
    assert compute_prefill_peak_blocks(config, 32_768) <= config.num_kv_blocks
