"""ReferenceModelConfig.from_options and the engine registry."""

from __future__ import annotations

import pytest

from tandem.engines.base import EngineError
from tandem.engines.reference import ReferenceConfigError, ReferenceEngine, ReferenceModelConfig
from tandem.engines.registry import make_engine

SMALL = {"hidden": 32, "num_heads": 2, "num_kv_heads": 1, "head_dim": 16, "num_kv_blocks": 64}


def test_from_options_coerces_yaml_like_values() -> None:
    config = ReferenceModelConfig.from_options(
        {"num_layers": "6", "rope_theta": 10000, "num_experts": 8.0, "model_name": "m"}
    )
    assert (config.num_layers, config.rope_theta, config.num_experts) == (6, 10000.0, 8)
    assert isinstance(config.rope_theta, float)
    assert config.model_name == "m"


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"num_layer": 4}, "num_layer"),
        ({"hidden": "wide"}, "hidden"),
        ({"hidden": True}, "hidden"),
        ({"hidden": [1]}, "hidden"),
        ({"num_layers": 1.5}, "num_layers"),
        ({"num_layers": 0}, "num_layers"),
        ({"kv_block_size": -16}, "kv_block_size"),
        ({"num_experts": -1}, "num_experts"),
        ({"num_experts": 2, "experts_per_token": 3}, "experts_per_token"),
        ({"num_heads": 6, "num_kv_heads": 4}, "num_heads"),
        ({"head_dim": 15}, "head_dim"),
        ({"eos_token_id": 10_000}, "eos_token_id"),
        ({"rope_theta": 1}, "rope_theta"),
        ({"model_name": ""}, "model_name"),
        ({"sliding_window": -1}, "sliding_window"),
        ({"sliding_window": 8}, "sliding_window"),  # under a block: never fills
        ({"sliding_window": 120}, "sliding_window"),  # not whole blocks
        ({"attention_tile": 100}, "attention_tile"),
        ({"max_batch_tokens": 0}, "max_batch_tokens"),
        ({"prefill_chunk": 0}, "prefill_chunk"),
        ({"row_tile": 0}, "row_tile"),
        ({"rope_pairing": "interleaved"}, "rope_pairing"),
        ({"prefix_cache": 1}, "prefix_cache"),
    ],
)
def test_from_options_names_the_bad_field(options: dict[str, object], field: str) -> None:
    with pytest.raises(ReferenceConfigError, match=field):
        ReferenceModelConfig.from_options(options)


def test_digest_covers_arithmetic_not_local_settings() -> None:
    """Two engines exchange KV iff their digests agree: tiling changes bits, the pool,
    the step budget and the prefix cache do not (a token computes the same in any
    chunk or batch)."""
    base = ReferenceModelConfig()
    for local in (
        {"num_kv_blocks": 7},
        {"max_batch_tokens": 5},
        {"prefill_chunk": 9},
        {"prefix_cache": False},
    ):
        assert ReferenceModelConfig.from_options(local).digest() == base.digest()
    for shared in ({"row_tile": 16}, {"attention_tile": 512}, {"rope_pairing": "adjacent"}):
        assert ReferenceModelConfig.from_options(shared).digest() != base.digest()


def test_make_engine_passes_the_model_source() -> None:
    with pytest.raises(EngineError, match="no_such_pkg"):
        make_engine("reference", {}, model_source="pkg://no_such_pkg/m.gguf")


def test_config_errors_are_engine_errors() -> None:
    assert issubclass(ReferenceConfigError, EngineError)


def test_make_engine_builds_a_reference_engine() -> None:
    engine = make_engine("reference", {**SMALL, "seed": 3})
    assert isinstance(engine, ReferenceEngine)
    assert engine.config.seed == 3
    assert engine.stats().kv_blocks_total == 64


def test_make_engine_rejects_unknown_kinds_and_options() -> None:
    with pytest.raises(EngineError, match=r"unknown engine kind 'vllm'.*reference"):
        make_engine("vllm", {})
    with pytest.raises(EngineError, match="bogus"):
        make_engine("reference", {"bogus": 1})
