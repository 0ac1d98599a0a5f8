"""``kvCache.offload`` for the trtllm engine: TensorRT-LLM's host tier rendered into
``kv_cache_config`` (and accepted by the fake, whose models follow TensorRT-LLM's
source), and the API refusing the disk tier TensorRT-LLM does not have."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tandem.api.v1alpha1 import InferenceCluster, PoolRole
from tandem.api.validate import ManifestError, load_inference_cluster, parse_object
from tandem.engines.trtllm import TrtllmConfigError, render_trtllm_config

EXAMPLES = Path(__file__).resolve().parents[4] / "manifests" / "examples"
GIB = 1 << 30


def cluster(example: str, pools: dict[str, dict[str, Any]]) -> InferenceCluster:
    """The example with ``pools`` merged into its prefill/decode pool specs."""
    doc = load_inference_cluster(EXAMPLES / example).to_wire()
    for role, fields in pools.items():
        doc["spec"][role] |= fields
    parsed = parse_object(doc)
    assert isinstance(parsed, InferenceCluster)
    return parsed


def offload(host: int, disk: int = 0, enabled: bool = True) -> dict[str, Any]:
    fields: dict[str, Any] = {"enabled": enabled, "hostBytes": host, "diskBytes": disk}
    if disk:
        fields["diskPath"] = "/kv"
    return {"kvCache": {"offload": fields}}


def test_trtllm_host_tier_is_split_over_the_worker_ranks() -> None:
    # gb200 example: decode workers run TP4, prefill workers TP1.
    cr = cluster("gpt-oss-120b-gb200.yaml", {"decode": offload(64 * GIB)})
    assert cr.spec.decode.tensor_parallel_size == 4
    decode = render_trtllm_config(cr, PoolRole.DECODE)["kv_cache_config"]
    assert decode["host_cache_size"] == 16 * GIB
    prefill = render_trtllm_config(cr, PoolRole.PREFILL)["kv_cache_config"]
    assert "host_cache_size" not in prefill


def test_trtllm_without_offload_renders_no_host_tier() -> None:
    off = cluster("gpt-oss-20b-h100.yaml", {"decode": offload(8 * GIB, enabled=False)})
    for role in PoolRole:
        assert "host_cache_size" not in render_trtllm_config(off, role)["kv_cache_config"]


def with_option(pools: dict[str, dict[str, Any]], host_cache_size: int) -> InferenceCluster:
    """The h100 example with ``pools`` and ``host_cache_size`` in the decode pool's
    engine options."""
    options = {"engineOptions": {"kv_cache_config": {"host_cache_size": host_cache_size}}}
    return cluster("gpt-oss-20b-h100.yaml", {"decode": {**pools.get("decode", {}), **options}})


def test_trtllm_host_cache_size_in_engine_options_may_repeat_the_spec() -> None:
    cr = with_option({"decode": offload(8 * GIB)}, 8 * GIB)
    assert render_trtllm_config(cr, PoolRole.DECODE)["kv_cache_config"]["host_cache_size"] == (
        8 * GIB
    )


@pytest.mark.parametrize(
    "pools",
    [{"decode": offload(8 * GIB)}, {}],
    ids=["another-size", "no-offload-in-the-spec"],
)
def test_trtllm_host_cache_size_in_engine_options_may_not_contradict_the_spec(
    pools: dict[str, dict[str, Any]],
) -> None:
    cr = with_option(pools, 4 * GIB)
    with pytest.raises(TrtllmConfigError, match=r"host_cache_size=.* contradicts decode"):
        render_trtllm_config(cr, PoolRole.DECODE)


def test_the_fake_tensorrt_llm_takes_the_rendered_host_tier(fake_trtllm: ModuleType) -> None:
    """Built as ``update_llm_args_with_extra_dict`` builds it: ``KvCacheConfig(**dict)``
    (a StrictBaseModel: an unknown or mistyped field fails)."""
    cr = cluster("gpt-oss-120b-gb200.yaml", {"decode": offload(64 * GIB)})
    rendered = render_trtllm_config(cr, PoolRole.DECODE)["kv_cache_config"]
    config = fake_trtllm.llmapi.KvCacheConfig(**rendered)
    assert (config.host_cache_size, config.onboard_blocks) == (16 * GIB, True)
    assert config.secondary_offload_min_priority is None


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_the_api_refuses_a_disk_tier_for_trtllm_naming_the_field(role: str) -> None:
    doc = load_inference_cluster(EXAMPLES / "gpt-oss-20b-h100.yaml").to_wire()
    doc["spec"][role] |= offload(GIB, disk=4 * GIB)
    with pytest.raises(ManifestError) as refused:
        parse_object(doc)
    field = f"spec.{role}.kvCache.offload.diskBytes"
    assert any(e.path == field and field in e.message for e in refused.value.errors)


def test_the_api_takes_a_host_tier_for_trtllm_and_ignores_a_disabled_disk_budget() -> None:
    cluster("gpt-oss-20b-h100.yaml", {"decode": offload(GIB)})
    cluster("gpt-oss-20b-h100.yaml", {"decode": offload(GIB, disk=GIB, enabled=False)})
