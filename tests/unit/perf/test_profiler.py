"""``tandem profile``'s timing shell on a tiny reference engine: every point measured
``repeats`` times from fresh prompts (no prefix-cache hit), nothing left holding KV, and
a table the loader accepts, with the worker the planner needs."""

from __future__ import annotations

import itertools
import json
from functools import partial
from pathlib import Path

from tandem.engines.reference import ReferenceEngine, ReferenceModelConfig
from tandem.engines.reference.shape import describe_worker, fits_pool
from tandem.perf.profile import compute_profile_grid, render_profile_table
from tandem.perf.profiler import measure_engine
from tandem.perf.table import load_perf_table

TINY = {
    "num_layers": 2,
    "hidden": 32,
    "num_heads": 2,
    "num_kv_heads": 1,
    "head_dim": 16,
    "intermediate": 64,
    "sliding_window": 32,
    "kv_block_size": 8,
    "num_kv_blocks": 160,
    "max_batch_tokens": 24,
    "prefill_chunk": 48,
}


def test_every_point_is_timed_from_fresh_prompts_and_releases_its_kv(tmp_path: Path) -> None:
    config = ReferenceModelConfig.from_options(TINY)
    engine = ReferenceEngine(config)
    grid = compute_profile_grid(
        config.max_context, partial(fits_pool, config), longest_prompt=200, repeats=2
    )
    # A 200-token sequence and its decode token hold 26 blocks of 8 tokens in the full
    # layer and 5 in the 32-token window's: four fit 160 blocks (124), eight do not (248).
    assert grid.prompts == (128, 200)
    assert grid.batches == (1, 2, 4)
    ticks = itertools.count()
    lines: list[str] = []
    measured = measure_engine(engine, grid, clock=lambda: float(next(ticks)), progress=lines.append)
    # A fake clock that ticks once per reading: each measurement is one tick, so every
    # repeat of every point was timed around exactly one call.
    assert measured.prefill == {128: [1.0, 1.0], 200: [1.0, 1.0]}
    assert set(measured.decode) == {(b, c) for b in (1, 2, 4) for c in (128, 200)}
    assert all(samples == [1.0, 1.0] for samples in measured.decode.values())
    assert lines[0] == "prefill 128 tokens: 1.000, 1.000 s"
    assert len(lines) == 2 + 6
    stats = engine.stats()
    # Random prompts never met a cached prefix: every prefill started from empty.
    assert stats.prompt_tokens_cached == 0
    assert stats.kv_blocks_free == stats.kv_blocks_total

    timed = measure_engine(engine, grid)  # the real clock, as `tandem profile` runs it
    document = render_profile_table(
        grid, timed, model="tandem-reference", engine="reference", accelerator="cpu",
        source="test", worker=describe_worker(config, engine.model.weights),
    )  # fmt: skip
    path = tmp_path / "table.json"
    path.write_text(json.dumps(document))
    table = load_perf_table(path)
    assert table.prefill_tokens == (128.0, 200.0)
    assert (table.decode_batch, table.decode_context) == ((1.0, 2.0, 4.0), (128.0, 200.0))
    assert table.worker is not None
    # Blocks x tokens x (K, V) x one KV head x 16 dims x 4 bytes.
    assert table.worker.kv_pool_bytes == 160 * 8 * 2 * 1 * 16 * 4
    assert (table.worker.tokens_per_block, table.worker.max_num_tokens) == (8, 24)
