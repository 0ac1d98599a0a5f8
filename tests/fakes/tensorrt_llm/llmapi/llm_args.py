"""Mirrors tensorrt_llm/llmapi/llm_args.py (v1.2.1): option names, enums, validation.

Written independently of Tandem's renderer from the v1.2.1 field catalogue (BaseLlmArgs
llm_args.py:1885-2355, TorchLlmArgs :2768-3304, KvCacheConfig :1627-1772,
CacheTransceiverConfig :1806-1842, MoeConfig :443-477, DecodingBaseConfig :645-814,
EagleDecodingConfig :850-990). ``BaseLlmArgs`` forbids unknown fields (pydantic
``extra="forbid"``, :1889-1892); pydantic's ``ValidationError`` is a ``ValueError``, so
the fake raises ``ValueError`` where the real one fails validation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

_BASE_FIELDS = {
    "model",
    "tokenizer",
    "tokenizer_mode",
    "custom_tokenizer",
    "skip_tokenizer_init",
    "trust_remote_code",
    "tensor_parallel_size",
    "dtype",
    "revision",
    "tokenizer_revision",
    "pipeline_parallel_size",
    "context_parallel_size",
    "gpus_per_node",
    "moe_cluster_parallel_size",
    "moe_tensor_parallel_size",
    "moe_expert_parallel_size",
    "enable_attention_dp",
    "enable_lm_head_tp_in_adp",
    "pp_partition",
    "cp_config",
    "load_format",
    "fail_fast_on_attention_window_too_large",
    "enable_lora",
    "lora_config",
    "kv_cache_config",
    "enable_chunked_prefill",
    "guided_decoding_backend",
    "batched_logits_processor",
    "iter_stats_max_iterations",
    "request_stats_max_iterations",
    "peft_cache_config",
    "scheduler_config",
    "cache_transceiver_config",
    "sparse_attention_config",
    "speculative_config",
    "max_batch_size",
    "max_input_len",
    "max_seq_len",
    "max_beam_width",
    "max_num_tokens",
    "gather_generation_logits",
    "num_postprocess_workers",
    "postprocess_tokenizer_dir",
    "reasoning_parser",
    "decoding_config",
    "otlp_traces_endpoint",
    "backend",
    "return_perf_metrics",
    "orchestrator_type",
    "env_overrides",
}
_TORCH_FIELDS = {
    "garbage_collection_gen0_threshold",
    "cuda_graph_config",
    "attention_dp_config",
    "disable_overlap_scheduler",
    "moe_config",
    "nvfp4_gemm_config",
    "attn_backend",
    "sampler_type",
    "sampler_force_async_worker",
    "enable_iter_perf_stats",
    "enable_iter_req_stats",
    "print_iter_log",
    "perf_metrics_max_requests",
    "batch_wait_timeout_ms",
    "batch_wait_timeout_iters",
    "batch_wait_max_tokens_ratio",
    "torch_compile_config",
    "enable_autotuner",
    "enable_layerwise_nvtx_marker",
    "enable_min_latency",
    "stream_interval",
    "force_dynamic_quantization",
    "allreduce_strategy",
    "checkpoint_loader",
    "checkpoint_format",
    "kv_connector_config",
    "mm_encoder_only",
    "ray_worker_extension_cls",
    "ray_placement_config",
    "enable_sleep",
    "disable_flashinfer_sampling",
    "max_stats_len",
}
TORCH_LLM_ARGS_FIELDS = frozenset(_BASE_FIELDS | _TORCH_FIELDS)


def _build(
    cls: type[Any], data: Mapping[str, Any], aliases: Mapping[str, str] | None = None
) -> Any:
    names = {f.name for f in fields(cls)}
    aliases = aliases or {}
    kwargs = {aliases.get(k, k): v for k, v in data.items()}
    extra = sorted(set(kwargs) - names)
    if extra:
        raise ValueError(f"{cls.__name__}: extra inputs are not permitted: {extra}")
    return cls(**kwargs)


@dataclass(kw_only=True)
class KvCacheConfig:
    """Mirrors llm_args.py ``KvCacheConfig`` (:1627)."""

    enable_block_reuse: bool = True
    max_tokens: int | None = None
    max_attention_window: list[int] | None = None
    sink_token_length: int | None = None
    free_gpu_memory_fraction: float | None = 0.9
    host_cache_size: int | None = None
    onboard_blocks: bool = True
    cross_kv_cache_fraction: float | None = None
    secondary_offload_min_priority: int | None = None
    event_buffer_max_size: int = 0
    attention_dp_events_gather_period_ms: int = 5
    enable_partial_reuse: bool = True
    copy_on_partial_reuse: bool = True
    use_uvm: bool = False
    max_gpu_total_bytes: int = 0
    dtype: str = "auto"
    mamba_ssm_cache_dtype: str = "auto"
    tokens_per_block: int = 32

    def __post_init__(self) -> None:
        fraction = self.free_gpu_memory_fraction
        if fraction is not None and not 0 <= fraction <= 1:
            raise ValueError("free_gpu_memory_fraction must be in [0, 1]")


@dataclass(kw_only=True)
class CacheTransceiverConfig:
    """Mirrors llm_args.py ``CacheTransceiverConfig`` (:1806)."""

    BACKENDS: ClassVar[tuple[str, ...]] = ("DEFAULT", "UCX", "NIXL", "MOONCAKE", "MPI")
    backend: str | None = None
    max_tokens_in_buffer: int | None = None
    kv_transfer_timeout_ms: int | None = None
    kv_transfer_sender_future_timeout_ms: int | None = 1000

    def __post_init__(self) -> None:
        if self.backend is not None and self.backend not in self.BACKENDS:
            raise ValueError(f"backend must be one of {self.BACKENDS}, got {self.backend!r}")
        for name in ("kv_transfer_timeout_ms", "kv_transfer_sender_future_timeout_ms"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be > 0")


@dataclass(kw_only=True)
class MoeConfig:
    """Mirrors llm_args.py ``MoeConfig`` (:443); backend default CUTLASS at 1.2.1."""

    BACKENDS: ClassVar[tuple[str, ...]] = (
        "CUTLASS",
        "CUTEDSL",
        "WIDEEP",
        "TRTLLM",
        "DEEPGEMM",
        "VANILLA",
        "TRITON",
    )
    backend: str = "CUTLASS"
    max_num_tokens: int | None = None
    load_balancer: object | None = None
    disable_finalize_fusion: bool = False
    use_low_precision_moe_combine: bool = False

    def __post_init__(self) -> None:
        if self.backend not in self.BACKENDS:
            raise ValueError(f"backend must be one of {self.BACKENDS}, got {self.backend!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MoeConfig:
        built: MoeConfig = _build(cls, data)
        return built


@dataclass(kw_only=True)
class DecodingBaseConfig:
    """Mirrors llm_args.py ``DecodingBaseConfig`` (:645); ``from_dict`` dispatches on
    ``decoding_type`` (:768)."""

    decoding_type: ClassVar[str] = ""
    max_draft_len: int | None = None
    max_total_draft_tokens: int | None = None
    speculative_model: str | None = None
    max_concurrency: int | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DecodingBaseConfig:
        payload = dict(data)
        kind = payload.pop("decoding_type", None)
        registry: dict[str, type[DecodingBaseConfig]] = {"Eagle": EagleDecodingConfig}
        if kind not in registry:
            raise ValueError(f"Invalid decoding type: {kind!r}")
        config: DecodingBaseConfig = _build(
            registry[kind], payload, {"speculative_model_dir": "speculative_model"}
        )
        return config


@dataclass(kw_only=True)
class EagleDecodingConfig(DecodingBaseConfig):
    """Mirrors llm_args.py ``EagleDecodingConfig`` (:850); Eagle-3 in place via
    ``eagle3_one_model`` (no separate Eagle3 class at 1.2.1)."""

    decoding_type: ClassVar[str] = "Eagle"
    eagle_choices: list[list[int]] | None = None
    greedy_sampling: bool | None = True
    posterior_threshold: float | None = None
    use_dynamic_tree: bool | None = False
    num_eagle_layers: int | None = None
    eagle3_one_model: bool | None = True
    eagle3_layers_to_capture: list[int] | None = None
    eagle3_model_arch: str = "llama3"

    def __post_init__(self) -> None:
        if self.max_draft_len is None:
            raise ValueError("max_draft_len is required for Eagle decoding")
        if not self.speculative_model:
            raise ValueError("speculative_model is required for Eagle decoding")


_NESTED: dict[str, type[Any]] = {
    "kv_cache_config": KvCacheConfig,
    "cache_transceiver_config": CacheTransceiverConfig,
    "moe_config": MoeConfig,
}


@dataclass(frozen=True)
class TorchLlmArgs:
    """The validated arguments of an LLM (mirrors ``TorchLlmArgs``, :2768)."""

    values: Mapping[str, Any]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> TorchLlmArgs:
        extra = sorted(set(kwargs) - TORCH_LLM_ARGS_FIELDS)
        if extra:
            raise ValueError(f"TorchLlmArgs: extra inputs are not permitted: {extra}")
        values = dict(kwargs)
        for name, config_type in _NESTED.items():
            raw = values.get(name)
            if isinstance(raw, Mapping):
                values[name] = _build(config_type, raw)
            elif raw is not None and not isinstance(raw, config_type):
                raise ValueError(f"{name} must be a {config_type.__name__}")
        speculative = values.get("speculative_config")
        if speculative is not None and not isinstance(speculative, DecodingBaseConfig):
            raise ValueError("speculative_config must be a DecodingBaseConfig")
        values.setdefault("kv_cache_config", KvCacheConfig())
        values.setdefault("moe_config", MoeConfig())
        values.setdefault("disable_overlap_scheduler", False)
        values.setdefault("enable_iter_perf_stats", False)
        return cls(values)


def update_llm_args_with_extra_dict(
    llm_args: dict[str, Any],
    llm_args_dict: dict[str, Any],
    extra_llm_api_options: str | None = None,
) -> dict[str, Any]:
    """Mirrors llm_args.py / llm_utils.py ``update_llm_args_with_extra_dict``: nested
    YAML dicts become config objects for the fields that need ``from_dict``."""
    converted = dict(llm_args_dict)
    field_mapping: dict[str, Any] = {
        "speculative_config": DecodingBaseConfig,
        "moe_config": MoeConfig,
    }
    for name, config_type in field_mapping.items():
        if isinstance(converted.get(name), Mapping):
            converted[name] = config_type.from_dict(converted[name])
    return llm_args | converted
