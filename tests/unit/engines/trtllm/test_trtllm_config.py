"""render_trtllm_config: golden per accelerator profile and role, invariants, errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tandem.api.v1alpha1 import InferenceCluster, InferenceClusterSpec
from tandem.api.validate import load_inference_cluster
from tandem.engines.trtllm import (
    TrtllmConfigError,
    dump_llm_api_options,
    render_trtllm_config,
)
from tandem.engines.trtllm import llm_args as known

ROOT = Path(__file__).resolve().parents[4]
GOLDEN = Path(__file__).with_name("golden")
UPDATE = os.environ.get("TANDEM_UPDATE_GOLDEN") == "1"


def cluster_for(profile: str) -> InferenceCluster:
    """The example manifest of a profile; h200 has none, so it gets 120b at TP2 x TP4."""
    examples = {
        "gb200": "gpt-oss-120b-gb200.yaml",
        "b200": "gpt-oss-120b-b200.yaml",
        "h100": "gpt-oss-20b-h100.yaml",
    }
    if profile in examples:
        return load_inference_cluster(ROOT / "manifests" / "examples" / examples[profile])
    return make_cluster(
        {
            "accelerator": {"profile": "h200"},
            "prefill": {"tensorParallelSize": 2, "gpusPerWorker": 2},
            "decode": {"tensorParallelSize": 4, "gpusPerWorker": 4},
        }
    )


def make_cluster(spec: dict[str, Any], model: str = "openai/gpt-oss-120b") -> InferenceCluster:
    base: dict[str, Any] = {
        "model": {"name": model, "maxInputTokens": 32768, "maxOutputTokens": 8192},
        "engine": {"kind": "trtllm"},
        "accelerator": {"profile": "b200"},
    }
    for key, value in spec.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return InferenceCluster.model_validate(
        {
            "apiVersion": "tandem.dev/v1alpha1",
            "kind": "InferenceCluster",
            "metadata": {"name": "c"},
            "spec": base,
        }
    )


@pytest.mark.parametrize("profile", ["gb200", "b200", "h200", "h100"])
@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_matches_golden(profile: str, role: str) -> None:
    rendered = dump_llm_api_options(render_trtllm_config(cluster_for(profile), role))
    path = GOLDEN / f"{profile}-{role}.yaml"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(rendered)
    assert rendered == path.read_text(), f"re-run with TANDEM_UPDATE_GOLDEN=1 and review {path}"


@pytest.mark.parametrize("profile", ["gb200", "b200", "h200", "h100"])
@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_invariants_hold_for_every_profile(profile: str, role: str) -> None:
    cluster = cluster_for(profile)
    spec: InferenceClusterSpec = cluster.spec
    config = render_trtllm_config(cluster, role)
    assert set(config) <= known.LLM_ARGS
    block = config["kv_cache_config"]["tokens_per_block"]
    buffer = config["cache_transceiver_config"]["max_tokens_in_buffer"]
    assert buffer % block == 0 and buffer >= spec.model.max_input_tokens
    assert config["cache_transceiver_config"]["backend"] in known.CACHE_TRANSCEIVER_BACKENDS
    assert config["disable_overlap_scheduler"] is (role == "prefill")
    pool = spec.prefill if role == "prefill" else spec.decode
    assert config["tensor_parallel_size"] == pool.tensor_parallel_size
    blackwell = profile in ("gb200", "b200")
    assert config["moe_config"]["backend"] == ("TRTLLM" if blackwell else "TRITON")
    assert config["kv_cache_config"]["dtype"] == "fp8"


@given(
    max_input=st.integers(min_value=1, max_value=200_000),
    block=st.sampled_from([8, 16, 32, 64, 128]),
)
def test_transfer_buffer_is_the_max_input_rounded_up_to_blocks(max_input: int, block: int) -> None:
    cluster = make_cluster(
        {
            "model": {"maxInputTokens": max_input},
            "engine": {"options": {"kv_cache_config": {"tokens_per_block": block}}},
        }
    )
    buffer = render_trtllm_config(cluster, "prefill")["cache_transceiver_config"][
        "max_tokens_in_buffer"
    ]
    assert buffer % block == 0
    assert max_input <= buffer < max_input + block


def test_user_buffer_larger_than_the_prompt_is_kept_and_rounded() -> None:
    cluster = make_cluster(
        {"kvTransfer": {"maxTokensInBuffer": 40_001}, "model": {"maxInputTokens": 32768}}
    )
    config = render_trtllm_config(cluster, "decode")
    assert config["cache_transceiver_config"]["max_tokens_in_buffer"] == 40_032


def test_tcp_kv_backend_renders_ucx_and_timeout_follows_the_spec() -> None:
    cluster = make_cluster({"kvTransfer": {"backend": "tcp", "timeoutSeconds": 12.5}})
    transceiver = render_trtllm_config(cluster, "prefill")["cache_transceiver_config"]
    assert transceiver["backend"] == "UCX"
    assert transceiver["kv_transfer_timeout_ms"] == 12_500


def test_pool_options_merge_over_engine_options() -> None:
    cluster = make_cluster(
        {
            "engine": {"options": {"kv_cache_config": {"free_gpu_memory_fraction": 0.7}}},
            "decode": {
                "engineOptions": {"kv_cache_config": {"dtype": "auto"}, "max_batch_size": 64}
            },
        }
    )
    decode = render_trtllm_config(cluster, "decode")
    prefill = render_trtllm_config(cluster, "prefill")
    assert decode["kv_cache_config"]["free_gpu_memory_fraction"] == 0.7
    assert decode["kv_cache_config"]["dtype"] == "auto"
    assert decode["max_batch_size"] == 64
    assert prefill["kv_cache_config"]["dtype"] == "fp8"
    assert "max_batch_size" not in prefill


def test_expert_parallel_splits_the_tp_group() -> None:
    cluster = make_cluster({"decode": {"tensorParallelSize": 8, "expertParallelSize": 4}})
    config = render_trtllm_config(cluster, "decode")
    assert (config["moe_expert_parallel_size"], config["moe_tensor_parallel_size"]) == (4, 2)


def test_eagle3_on_decode_is_mirrored_onto_prefill() -> None:
    eagle = {"model": "/models/gpt-oss-120b-eagle3", "max_draft_len": 4}
    cluster = make_cluster({"decode": {"engineOptions": {"eagle3": eagle}}})
    expected = {
        "decoding_type": "Eagle",
        "max_draft_len": 4,
        "speculative_model_dir": "/models/gpt-oss-120b-eagle3",
        "eagle3_one_model": True,
    }
    for role in ("prefill", "decode"):
        config = render_trtllm_config(cluster, role)
        assert config["speculative_config"] == expected
        assert "eagle3" not in config


def test_unknown_model_gets_no_moe_settings() -> None:
    cluster = make_cluster({}, model="example/dense-8b")
    config = render_trtllm_config(cluster, "decode")
    assert "moe_config" not in config and "moe_expert_parallel_size" not in config


@pytest.mark.parametrize(
    ("spec", "role", "message"),
    [
        (
            {"prefill": {"engineOptions": {"disable_overlap_scheduler": False}}},
            "prefill",
            "disable_overlap_scheduler must stay true",
        ),
        (
            {"engine": {"options": {"cache_transceiver_config": {"max_tokens_in_buffer": 1024}}}},
            "decode",
            "1024 is smaller than model.maxInputTokens 32768",
        ),
        ({"engine": {"options": {"kv_cache_cfg": {}}}}, "decode", "kv_cache_cfg"),
        (
            {"engine": {"options": {"kv_cache_config": {"free_mem": 0.5}}}},
            "decode",
            "unknown kv_cache_config field(s) free_mem",
        ),
        (
            {"engine": {"options": {"cache_transceiver_config": {"backend": "RDMA"}}}},
            "prefill",
            "'RDMA' is not one of",
        ),
        ({"engine": {"options": {"moe_config": {"backend": "FAST"}}}}, "decode", "'FAST'"),
        (
            {"decode": {"engineOptions": {"tensor_parallel_size": 8}}},
            "decode",
            "contradicts the pool's tensorParallelSize 1",
        ),
        (
            {"decode": {"tensorParallelSize": 4, "expertParallelSize": 3}},
            "decode",
            "3 must divide tensorParallelSize 4",
        ),
        (
            {"prefill": {"engineOptions": {"eagle3": {"model": "/d"}}}},
            "decode",
            "set Eagle-3 on the decode pool",
        ),
        ({"decode": {"engineOptions": {"eagle3": {}}}}, "decode", "draft model path"),
        (
            {"engine": {"options": {"enable_chunked_prefill": False, "max_num_tokens": 4096}}},
            "prefill",
            "max_num_tokens 4096 is below model.maxInputTokens 32768",
        ),
        ({"engine": {"options": {"model": "/elsewhere"}}}, "decode", "set the model in spec.model"),
    ],
)
def test_invalid_specs_fail_with_the_field(spec: dict[str, Any], role: str, message: str) -> None:
    with pytest.raises(TrtllmConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        render_trtllm_config(make_cluster(spec), role)


def test_cpu_profile_is_refused() -> None:
    with pytest.raises(TrtllmConfigError, match="needs a GPU profile, got 'cpu'"):
        render_trtllm_config(make_cluster({"accelerator": {"profile": "cpu"}}), "decode")


def test_yaml_dump_round_trips() -> None:
    config = render_trtllm_config(cluster_for("gb200"), "decode")
    assert yaml.safe_load(dump_llm_api_options(config)) == config
