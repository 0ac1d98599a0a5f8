"""TensorRT-LLM engine options rendered from an InferenceCluster: a pure function.

``render_trtllm_config(cluster, role)`` returns the LLM API arguments of one pool's
workers (what ``trtllm-serve --extra_llm_api_options`` reads as YAML, and what
``tensorrt_llm.LLM(model, **options)`` takes). Option names and enums are those of
TensorRT-LLM 1.2.1 (see ``version.py``). The user's ``spec.engine.options`` and the
pool's ``engineOptions`` (merged over them) pass through, with these rules on top:

* The cache transceiver moves the KV: backend NIXL (``kvTransfer.backend: nixl``) or UCX
  (``tcp``), ``max_tokens_in_buffer`` at least ``model.maxInputTokens`` and rounded up
  to whole KV blocks (a buffer smaller than a prompt deadlocks or OOMs the transfer),
  and ``kv_transfer_timeout_ms`` from ``kvTransfer.timeoutSeconds`` so a decode worker
  that never pulls does not pin prefill KV forever.
* Prefill workers run with the overlap scheduler off (context-only requests need it).
* KV cache in fp8 with 85% of the free memory by default (the rest stays free for the
  transceiver's staging buffers).
* MoE kernels by GPU generation for MXFP4 models (gpt-oss): TRTLLM on Blackwell, TRITON
  on Hopper — 1.2.1 defaults to CUTLASS, which is slower for MXFP4 (TensorRT-LLM's
  gpt-oss deployment guide, 1.2.0rc2.post2).
* Chunked prefill on, so prompts longer than ``max_num_tokens`` are prefilled in steps.
* The pool's ``kvCache.offload`` as TensorRT-LLM's host tier: ``host_cache_size`` (the
  secondary pool, per rank) from ``hostBytes`` split over the worker's TP ranks; blocks
  found there are copied back on a prefix hit (``onboard_blocks``, default true). No disk
  tier: TensorRT-LLM has none (the API refuses ``diskBytes`` for trtllm pools).
* Optional Eagle-3 speculative decoding from the decode pool's ``eagle3`` option,
  mirrored onto prefill workers: the context phase produces the first draft tokens that
  ride along in the disaggregated params (TensorRT-LLM configures both sides alike in
  its own disaggregated Eagle-3 tests).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import yaml

from tandem.api.v1alpha1 import (
    AcceleratorProfile,
    InferenceCluster,
    InferenceClusterSpec,
    KvBackend,
    MultiNodeLauncher,
    PoolRole,
    PoolSpec,
)
from tandem.capacity.models import find_architecture
from tandem.engines.trtllm import llm_args

DEFAULT_KV_DTYPE = "fp8"
DEFAULT_FREE_GPU_MEMORY_FRACTION = 0.85
DEFAULT_EAGLE3_DRAFT_LEN = 3

MOE_BACKEND_BY_PROFILE: Mapping[AcceleratorProfile, str] = {
    AcceleratorProfile.GB200: "TRTLLM",
    AcceleratorProfile.B200: "TRTLLM",
    AcceleratorProfile.H200: "TRITON",
    AcceleratorProfile.H100: "TRITON",
}

TRANSCEIVER_BACKEND_BY_KV_BACKEND: Mapping[KvBackend, str] = {
    KvBackend.NIXL: "NIXL",
    # Plain TCP has no NIXL plugin of its own in TensorRT-LLM: UCX with UCX_TLS=tcp.
    KvBackend.TCP: "UCX",
}

# Tandem's own shorthand keys inside engine options; everything else is an LLM API arg.
EAGLE3_KEY = "eagle3"


class TrtllmConfigError(ValueError):
    """The spec cannot be rendered into valid TensorRT-LLM options; says which field."""


# Events TensorRT-LLM buffers between two polls (every 0.5 s): ample for thousands of
# blocks stored or evicted per second; overflow loses events, which the translator
# survives (unknown parents are skipped).
DEFAULT_KV_EVENT_BUFFER = 16384


def merge_options(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``: nested mappings merge key by key, anything else
    (lists included) is replaced."""
    merged: dict[str, Any] = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_options(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def pool_of(spec: InferenceClusterSpec, role: PoolRole) -> PoolSpec:
    return spec.prefill if role is PoolRole.PREFILL else spec.decode


def pool_engine_options(spec: InferenceClusterSpec, role: PoolRole) -> dict[str, Any]:
    """``spec.engine.options`` with the pool's ``engineOptions`` merged over them."""
    return merge_options(
        spec.engine.options.as_dict(), pool_of(spec, role).engine_options.as_dict()
    )


def render_trtllm_config(
    cluster: InferenceCluster | InferenceClusterSpec, role: PoolRole | str
) -> dict[str, Any]:
    """The LLM API options for ``role``'s workers (see the module docstring)."""
    spec = cluster.spec if isinstance(cluster, InferenceCluster) else cluster
    role = PoolRole(role)
    profile = spec.accelerator.profile
    if profile not in MOE_BACKEND_BY_PROFILE:
        raise TrtllmConfigError(
            f"accelerator.profile: the trtllm engine needs a GPU profile, got {profile.value!r}"
        )
    pool = pool_of(spec, role)
    options = pool_engine_options(spec, role)
    options.pop(EAGLE3_KEY, None)
    _check_user_options(spec, role, pool, options)

    rendered = merge_options(_defaults(spec, role, pool), options)
    rendered["kv_cache_config"] = _host_offload(rendered["kv_cache_config"], role, pool)
    rendered["disable_overlap_scheduler"] = _overlap_scheduler_off(role, options)
    kv_cache = rendered["kv_cache_config"]
    tokens_per_block = _positive_int(kv_cache, "tokens_per_block", "kv_cache_config")
    rendered["cache_transceiver_config"] = _transceiver(
        spec, rendered["cache_transceiver_config"], tokens_per_block
    )
    _check_chunking(spec, rendered)
    if "moe_config" in rendered:
        _check_enum(rendered["moe_config"], "backend", llm_args.MOE_BACKENDS, "moe_config")
    speculative = _eagle3(spec)
    if speculative is not None:
        rendered["speculative_config"] = speculative
    return rendered


def dump_llm_api_options(options: Mapping[str, Any]) -> str:
    """The YAML ``trtllm-serve --extra_llm_api_options`` reads (stable key order)."""
    return yaml.safe_dump(dict(options), sort_keys=True, default_flow_style=False)


def _defaults(spec: InferenceClusterSpec, role: PoolRole, pool: PoolSpec) -> dict[str, Any]:
    model = spec.model
    architecture = find_architecture(model.name)
    defaults: dict[str, Any] = {
        "tensor_parallel_size": pool.tensor_parallel_size,
        "max_seq_len": model.max_input_tokens + model.max_output_tokens,
        "max_num_tokens": llm_args.DEFAULT_MAX_NUM_TOKENS,
        "enable_chunked_prefill": True,
        "enable_iter_perf_stats": True,
        # Tandem's frontend tokenizes (the tokenizer the model spec selects; harmony for
        # gpt-oss) and workers exchange ids: TensorRT-LLM needs no tokenizer of its own,
        # so it cannot disagree with ours. Requests carry end_id and stop ids explicitly.
        "skip_tokenizer_init": True,
        "kv_cache_config": {
            "dtype": DEFAULT_KV_DTYPE,
            "free_gpu_memory_fraction": DEFAULT_FREE_GPU_MEMORY_FRACTION,
            "tokens_per_block": llm_args.DEFAULT_TOKENS_PER_BLOCK,
            # TensorRT-LLM's KV cache events feed the routers' index (kv_events.py).
            "event_buffer_max_size": DEFAULT_KV_EVENT_BUFFER,
        },
        "cache_transceiver_config": {
            "backend": TRANSCEIVER_BACKEND_BY_KV_BACKEND[spec.kv_transfer.backend],
        },
    }
    if pool.group_launcher is MultiNodeLauncher.RAY:
        # Ranks on the other pods of the worker's LeaderWorkerSet group, which
        # tandem.worker.ray_launch joined into one Ray cluster (RAY_ADDRESS).
        defaults["orchestrator_type"] = "ray"
    is_moe = architecture is not None and architecture.is_moe
    if is_moe or pool.expert_parallel_size > 1:
        tp, ep = pool.tensor_parallel_size, pool.expert_parallel_size
        if tp % ep:
            where = f"{role.value}.expertParallelSize"
            raise TrtllmConfigError(
                f"{where}: {ep} must divide tensorParallelSize {tp} (TensorRT-LLM splits the "
                "TP group into expert-parallel x expert-tensor-parallel ranks)"
            )
        defaults["moe_expert_parallel_size"] = ep
        defaults["moe_tensor_parallel_size"] = tp // ep
    if architecture is not None and architecture.mxfp4_experts:
        defaults["moe_config"] = {"backend": MOE_BACKEND_BY_PROFILE[spec.accelerator.profile]}
    return defaults


def _check_user_options(
    spec: InferenceClusterSpec, role: PoolRole, pool: PoolSpec, options: Mapping[str, Any]
) -> None:
    where = f"engine options of the {role.value} pool"
    unknown = sorted(set(options) - llm_args.LLM_ARGS)
    if unknown:
        raise TrtllmConfigError(
            f"{where}: unknown TensorRT-LLM LLM API option(s) {', '.join(unknown)}"
        )
    for name, fields in llm_args.NESTED_FIELDS.items():
        value = options.get(name)
        if value is None:
            continue
        if not isinstance(value, Mapping):
            raise TrtllmConfigError(f"{where}: {name} must be a mapping")
        unknown = sorted(set(value) - fields)
        if unknown:
            raise TrtllmConfigError(f"{where}: unknown {name} field(s) {', '.join(unknown)}")
    if "model" in options:
        raise TrtllmConfigError(f"{where}: set the model in spec.model, not in engine options")
    for option, field, value in (
        ("tensor_parallel_size", "tensorParallelSize", pool.tensor_parallel_size),
        ("moe_expert_parallel_size", "expertParallelSize", pool.expert_parallel_size),
    ):
        if option in options and options[option] != value:
            raise TrtllmConfigError(
                f"{where}: {option}={options[option]!r} contradicts the pool's {field} "
                f"{value}; set it on the pool"
            )
    if EAGLE3_KEY in spec.prefill.engine_options.as_dict():
        raise TrtllmConfigError(
            "prefill.engineOptions.eagle3: set Eagle-3 on the decode pool (or "
            "spec.engine.options); prefill workers get the same speculative config"
        )


def _host_offload(kv_cache: Mapping[str, Any], role: PoolRole, pool: PoolSpec) -> dict[str, Any]:
    """``kv_cache`` with the pool's host tier (see the module docstring).

    ``KvCacheConfig`` fields (``tensorrt_llm/llmapi/llm_args.py``, the stored versions
    ``version.py`` lists, index ids 1090804222 and 7019226376): ``host_cache_size``
    (bytes, default None: no secondary pool), ``onboard_blocks`` (default True: a block
    found in host memory is copied back into the GPU pool) and
    ``secondary_offload_min_priority`` (default None). Each rank's ``KVCacheManager``
    sizes its own secondary pool, ``host_cache_size // get_cache_bytes_per_token()`` of
    its shard (``tensorrt_llm/_torch/pyexecutor/resource_manager.py``, stored version
    index id 56304441455), so a worker of TP ranks holds TP x ``host_cache_size``.
    ``secondary_offload_min_priority`` stays unset: unset, the LRU eviction policy uses
    ``kDefaultSecondaryOffloadMinPriority`` = 30 and offloads a primary block whose
    priority is at least that (``cpp/tensorrt_llm/batch_manager/evictionPolicy.cpp``,
    stored version index id 781321096), and every block Tandem's requests store has the
    default priority, ``kDefaultRetentionPriority`` = 35 (Tandem sets no retention
    priorities), so every evicted block may go to host memory.
    """
    offload = pool.kv_cache.offload
    rendered = dict(kv_cache)
    host_cache_size = offload.host_bytes // pool.tensor_parallel_size if offload.enabled else 0
    requested = rendered.get("host_cache_size")
    if requested is not None and requested != (host_cache_size or None):
        raise TrtllmConfigError(
            f"engine options of the {role.value} pool: kv_cache_config.host_cache_size="
            f"{requested!r} contradicts {role.value}.kvCache.offload (host_cache_size "
            f"{host_cache_size or None}); set the host tier in kvCache.offload.hostBytes"
        )
    if host_cache_size:
        rendered["host_cache_size"] = host_cache_size
    return rendered


def _overlap_scheduler_off(role: PoolRole, options: Mapping[str, Any]) -> bool:
    requested = options.get("disable_overlap_scheduler")
    if role is PoolRole.PREFILL:
        if requested is False:
            raise TrtllmConfigError(
                "prefill engine options: disable_overlap_scheduler must stay true on prefill "
                "workers (context-only requests do not work with the overlap scheduler)"
            )
        return True
    return bool(requested) if requested is not None else False


def _transceiver(
    spec: InferenceClusterSpec, config: Mapping[str, Any], tokens_per_block: int
) -> dict[str, Any]:
    rendered = dict(config)
    _check_enum(
        rendered, "backend", llm_args.CACHE_TRANSCEIVER_BACKENDS, "cache_transceiver_config"
    )
    max_input = spec.model.max_input_tokens
    requested = rendered.get("max_tokens_in_buffer", spec.kv_transfer.max_tokens_in_buffer)
    if requested is None:
        requested = max_input
    if not isinstance(requested, int) or isinstance(requested, bool) or requested < max_input:
        raise TrtllmConfigError(
            f"cache_transceiver_config.max_tokens_in_buffer: {requested!r} is smaller than "
            f"model.maxInputTokens {max_input}; the transfer buffer must hold the longest "
            "prompt or KV transfers deadlock"
        )
    rendered["max_tokens_in_buffer"] = -(-requested // tokens_per_block) * tokens_per_block
    rendered.setdefault("kv_transfer_timeout_ms", round(spec.kv_transfer.timeout_seconds * 1000))
    return rendered


def _check_chunking(spec: InferenceClusterSpec, rendered: Mapping[str, Any]) -> None:
    max_num_tokens = _positive_int(rendered, "max_num_tokens", "engine options")
    max_input = spec.model.max_input_tokens
    if not rendered.get("enable_chunked_prefill") and max_num_tokens < max_input:
        raise TrtllmConfigError(
            f"engine options: max_num_tokens {max_num_tokens} is below model.maxInputTokens "
            f"{max_input} with enable_chunked_prefill off; long prompts could never be "
            "scheduled — enable chunked prefill or raise max_num_tokens"
        )


def _eagle3(spec: InferenceClusterSpec) -> dict[str, Any] | None:
    shorthand = pool_engine_options(spec, PoolRole.DECODE).get(EAGLE3_KEY)
    if shorthand is None:
        return None
    where = "decode engine options: eagle3"
    if not isinstance(shorthand, Mapping):
        raise TrtllmConfigError(f"{where} must be a mapping with at least `model`")
    unknown = sorted(set(shorthand) - {"model", "max_draft_len", "one_model"})
    if unknown:
        raise TrtllmConfigError(f"{where}: unknown field(s) {', '.join(unknown)}")
    model = shorthand.get("model")
    if not isinstance(model, str) or not model:
        raise TrtllmConfigError(f"{where}.model: the Eagle-3 draft model path is required")
    draft_len = shorthand.get("max_draft_len", DEFAULT_EAGLE3_DRAFT_LEN)
    if not isinstance(draft_len, int) or isinstance(draft_len, bool) or draft_len < 1:
        raise TrtllmConfigError(f"{where}.max_draft_len must be an integer >= 1")
    one_model = shorthand.get("one_model", True)
    if not isinstance(one_model, bool):
        raise TrtllmConfigError(f"{where}.one_model must be true or false")
    # EagleDecodingConfig at 1.2.1: decoding_type "Eagle"; Eagle-3 is chosen in place by
    # eagle3_one_model; speculative_model_dir is the alias of speculative_model.
    return {
        "decoding_type": "Eagle",
        "max_draft_len": draft_len,
        "speculative_model_dir": model,
        "eagle3_one_model": one_model,
    }


def _check_enum(config: Mapping[str, Any], key: str, allowed: frozenset[str], where: str) -> None:
    value = config.get(key)
    if value is not None and value not in allowed:
        raise TrtllmConfigError(
            f"{where}.{key}: {value!r} is not one of {', '.join(sorted(allowed))}"
        )


def _positive_int(config: Mapping[str, Any], key: str, where: str) -> int:
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise TrtllmConfigError(f"{where}.{key} must be a positive integer, got {value!r}")
    return value
