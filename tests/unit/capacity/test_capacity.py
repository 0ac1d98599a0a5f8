"""The capacity model: KV bytes equal the analytical gpt-oss figures; fit checks with numbers."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tandem.api.v1alpha1 import AcceleratorProfile, PoolSpec
from tandem.api.validate import load_inference_cluster
from tandem.capacity import (
    GPT_OSS_20B,
    GPT_OSS_120B,
    GPUS,
    TANDEM_REFERENCE,
    CapacityError,
    KvDtype,
    check_fit,
    find_architecture,
    kv_bytes,
    kv_bytes_per_gpu,
    kv_bytes_per_token_per_layer,
    parse_kv_dtype,
)
from tandem.capacity.models import GIB
from tandem.capacity.plan import plan_cluster
from tandem.engines.reference import ReferenceModelConfig

EXAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "examples"


# The figures of shared/notes/stack-facts.md, derived there from the model cards.
@pytest.mark.parametrize(
    ("model", "dtype", "expected"),
    [
        (GPT_OSS_120B, KvDtype.BF16, 1_212_678_144),
        (GPT_OSS_120B, KvDtype.FP8, 606_339_072),
        (GPT_OSS_20B, KvDtype.BF16, 808_452_096),
    ],
)
def test_kv_of_a_32k_prompt_matches_the_published_figures(
    model: object, dtype: KvDtype, expected: int
) -> None:
    assert kv_bytes(model, 32_768, dtype) == expected  # type: ignore[arg-type]


def test_per_token_per_layer_is_2_kv_heads_head_dim_bytes() -> None:
    assert kv_bytes_per_token_per_layer(GPT_OSS_120B, KvDtype.BF16) == 2 * 8 * 64 * 2 == 2048


def test_the_window_halves_long_prompts() -> None:
    without_window = 2048 * 36 * 32_768
    assert kv_bytes(GPT_OSS_120B, 32_768) / without_window == pytest.approx(0.5, abs=0.01)


@given(tokens=st.integers(0, 4 * 128))
def test_short_prompts_fill_every_layer_equally(tokens: int) -> None:
    if tokens <= 128:
        assert kv_bytes(GPT_OSS_20B, tokens) == 2048 * 24 * tokens


def test_reference_shape_agrees_with_the_reference_engine() -> None:
    engine = ReferenceModelConfig()
    assert kv_bytes_per_token_per_layer(TANDEM_REFERENCE, KvDtype.FP32) == engine.kv_token_bytes
    assert TANDEM_REFERENCE.num_layers == engine.num_layers
    assert TANDEM_REFERENCE.sliding_window == engine.sliding_window
    assert TANDEM_REFERENCE.sliding_layers == sum(
        engine.is_sliding(layer) for layer in range(engine.num_layers)
    )


@pytest.mark.parametrize("tp", [1, 2, 4, 8, 16])
def test_tensor_parallel_splits_kv_heads(tp: int) -> None:
    whole = kv_bytes(GPT_OSS_120B, 4096, KvDtype.FP8)
    shard = kv_bytes_per_gpu(GPT_OSS_120B, 4096, dtype=KvDtype.FP8, tensor_parallel_size=tp)
    heads_per_gpu = math.ceil(8 / tp) if tp <= 8 else 1
    assert shard == whole * heads_per_gpu // 8


def test_block_rounding_only_adds_partial_blocks() -> None:
    exact = kv_bytes_per_gpu(GPT_OSS_20B, 1000, dtype=KvDtype.BF16)
    blocked = kv_bytes_per_gpu(GPT_OSS_20B, 1000, dtype=KvDtype.BF16, tokens_per_block=32)
    # 12 full layers round 1000 -> 1024, 12 window layers keep 128 (already whole blocks).
    assert blocked - exact == 2048 * 12 * 24


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("openai/gpt-oss-120b", GPT_OSS_120B),
        ("hf://openai/GPT-OSS-20B/", GPT_OSS_20B),
        ("meta/llama-3-70b", None),
    ],
)
def test_find_architecture(name: str, expected: object) -> None:
    assert find_architecture(name) is expected


def test_kv_dtype_names() -> None:
    assert parse_kv_dtype("auto", native=KvDtype.BF16) is KvDtype.BF16
    assert parse_kv_dtype("FP8", native=KvDtype.BF16) is KvDtype.FP8
    with pytest.raises(ValueError, match="unknown KV cache dtype 'int3'"):
        parse_kv_dtype("int3", native=KvDtype.BF16)


def test_gpu_memory_per_profile() -> None:
    assert {p.value: g.memory_bytes // 10**9 for p, g in GPUS.items()} == {
        "gb200": 186,
        "b200": 180,
        "h200": 141,
        "h100": 80,
    }


def test_120b_tp1_on_an_h100_with_64_sequences_of_32k_is_rejected_with_numbers() -> None:
    report = check_fit(
        GPT_OSS_120B,
        PoolSpec(tensor_parallel_size=1),
        AcceleratorProfile.H100,
        64,
        seq_tokens=32_768,
        kv_dtype=KvDtype.FP8,
    )
    assert not report.fits and report.weights_fit
    assert report.kv_demand_bytes == 64 * report.kv_bytes_per_sequence
    assert report.kv_demand_bytes > report.kv_pool_bytes
    assert report.max_sequences == report.kv_pool_bytes // report.kv_bytes_per_sequence < 64
    message = report.message
    for fragment in (
        "gpt-oss-120b at TP1 on NVIDIA H100 (80 GB",
        "does not fit",
        "64 sequences of 32,768 tokens",
        f"{report.kv_demand_bytes / GIB:.1f} GiB of KV per GPU",
        "60.8 GiB of weights",
        f"at most {report.max_sequences} such sequences",
    ):
        assert fragment in message
    assert report.suggested_tensor_parallel_size == 2
    assert "TP2 would fit" in message
    with pytest.raises(CapacityError, match="does not fit"):
        report.raise_if_unfit()


def test_weights_that_cannot_fit_say_so() -> None:
    heavier = dataclasses.replace(GPT_OSS_120B, weight_bytes=90 * GIB)
    report = check_fit(heavier, PoolSpec(), AcceleratorProfile.H100, 1, seq_tokens=1024)
    assert not report.weights_fit and not report.fits
    assert "weights need 90.0 GiB per GPU plus" in report.message
    assert report.suggested_tensor_parallel_size == 2


def test_fitting_report_says_how_much_room_is_left() -> None:
    report = check_fit(
        GPT_OSS_20B,
        PoolSpec(),
        AcceleratorProfile.H100,
        32,
        seq_tokens=36_864,
        kv_dtype=KvDtype.FP8,
    )
    assert report.fits
    assert f"room for {report.max_sequences} sequences" in report.message
    assert report.max_sequences >= 32


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("gpt-oss-*.yaml")))
def test_every_gpu_example_fits(example: str) -> None:
    plan = plan_cluster(load_inference_cluster(EXAMPLES / example))
    assert plan.skipped is None
    assert [p.role.value for p in plan.pools] == ["prefill", "decode"]
    assert plan.fits, [p.report.message for p in plan.pools]


def test_plan_skips_cpu_clusters() -> None:
    plan = plan_cluster(load_inference_cluster(EXAMPLES / "reference-cpu.yaml"))
    assert plan.pools == () and plan.skipped is not None and "cpu" in plan.skipped
