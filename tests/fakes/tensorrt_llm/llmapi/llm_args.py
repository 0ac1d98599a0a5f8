"""Mirrors tensorrt_llm/llmapi/llm_args.py: the pydantic models ``LLM(**kwargs)`` validates.

Written from TensorRT-LLM's own source, not from Tandem's catalogue
(``tandem.engines.trtllm.llm_args``), so that an option name the renderer gets wrong
fails here too. Read in the public code index (NVIDIA/TensorRT-LLM, Apache-2.0), which
stores many versions of the file without tags; no v1.2.1 copy could be pinned (see
``tandem.engines.trtllm.version``). The field lists below are those of the newest
stored version read in full -- index id 7019226376, a main-branch version after the
release/1.2 branch point (it has ``Eagle3DecodingConfig``,
``CacheTransceiverConfig.transceiver_runtime``, the KV cache manager v2 switches and
``MoeConfig.backend`` "AUTO", which PR #11074 added on 2026-01-30) and before PR #12249
(2026-03-18, ``kv_transfer_timeout_ms`` default 60000: here still None). An older
stored version (id 1090804222, 1.1 era) was read for the names that moved.

Behaviour kept from that source:

* every model forbids unknown fields (``StrictBaseModel``, ``extra="forbid"``); pydantic's
  ``ValidationError`` is a ``ValueError``;
* ``LLM.__init__`` refuses a keyword that is not a ``TorchLlmArgs`` field (nor
  ``_mpi_session`` / ``backend``) with ``ValueError("LLM got invalid argument: KEY")``
  before building the args (tensorrt_llm/llmapi/llm.py);
* ``speculative_config`` is a union discriminated by ``decoding_type``; on the PyTorch
  backend ``TorchLlmArgs`` turns ``Eagle`` into ``Eagle3`` (an ``EagleDecodingConfig``
  subclass); ``speculative_model_dir`` is an alias of ``speculative_model``;
* ``update_llm_args_with_extra_dict`` merges a partial ``kv_cache_config`` into the
  base one and builds the config objects of its field mapping from dicts.

Fields the fake never reads are typed ``Any``: the real models validate their values,
the fake only knows their names. Speculative algorithms other than Eagle/Eagle3 are
left out (the fake has no drafter), so their ``decoding_type`` is refused here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, create_model, model_validator


class StrictBaseModel(BaseModel):
    """llm_args.py's base: unknown fields are an error."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), populate_by_name=True)


class KvCacheConfig(StrictBaseModel):
    enable_block_reuse: bool = True
    max_tokens: int | None = None
    max_attention_window: list[int] | None = None
    sink_token_length: int | None = None
    free_gpu_memory_fraction: float | None = Field(default=0.9, ge=0, le=1)
    host_cache_size: int | None = None
    onboard_blocks: bool = True
    cross_kv_cache_fraction: float | None = None
    secondary_offload_min_priority: int | None = None
    event_buffer_max_size: int = 0
    attention_dp_events_gather_period_ms: int = 5
    enable_partial_reuse: bool = True
    copy_on_partial_reuse: bool = True
    use_uvm: bool = False
    max_gpu_total_bytes: int = Field(default=0, ge=0)
    dtype: str = "auto"
    mamba_ssm_cache_dtype: Literal["auto", "float16", "bfloat16", "float32"] = "auto"
    tokens_per_block: int = 32
    use_kv_cache_manager_v2: bool = False
    max_util_for_resume: float = Field(default=0.95, ge=0, le=1)


class CacheTransceiverConfig(StrictBaseModel):
    backend: Literal["DEFAULT", "UCX", "NIXL", "MOONCAKE", "MPI"] | None = None
    transceiver_runtime: Literal["CPP", "PYTHON"] | None = None
    max_tokens_in_buffer: int | None = None
    kv_transfer_timeout_ms: int | None = Field(default=None, gt=0)
    kv_transfer_sender_future_timeout_ms: int | None = Field(default=1000, gt=0)


class MoeConfig(StrictBaseModel):
    backend: Literal[
        "AUTO", "CUTLASS", "CUTEDSL", "WIDEEP", "TRTLLM", "DEEPGEMM", "VANILLA", "TRITON"
    ] = "AUTO"
    max_num_tokens: int | None = None
    load_balancer: Any = None
    disable_finalize_fusion: bool = False
    use_low_precision_moe_combine: bool = False


class DecodingBaseConfig(StrictBaseModel):
    max_draft_len: int | None = Field(default=None, ge=0)
    max_total_draft_tokens: int | None = None
    speculative_model: str | None = Field(
        default=None, validation_alias=AliasChoices("speculative_model", "speculative_model_dir")
    )
    max_concurrency: int | None = Field(default=None, ge=0)
    draft_len_schedule: dict[int, int] | None = None
    load_format: str | None = None
    acceptance_window: int | None = Field(default=None, ge=0)
    acceptance_length_threshold: float | None = Field(default=None, ge=0)
    allow_advanced_sampling: bool = False


class EagleDecodingConfig(DecodingBaseConfig):
    decoding_type: Literal["Eagle"] = "Eagle"
    eagle_choices: list[list[int]] | None = None
    greedy_sampling: bool | None = True
    posterior_threshold: float | None = None
    use_dynamic_tree: bool | None = False
    dynamic_tree_max_topK: int | None = None
    num_eagle_layers: int | None = None
    max_non_leaves_per_layer: int | None = None
    eagle3_one_model: bool | None = True
    eagle3_layers_to_capture: set[int] | None = None
    eagle3_model_arch: Literal["llama3", "mistral_large3"] = "llama3"

    @model_validator(mode="after")
    def _check_eagle(self) -> EagleDecodingConfig:
        if not self.max_draft_len:
            raise ValueError("max_draft_len must be > 0 for Eagle")
        if self.speculative_model is None:
            raise ValueError("Draft model must be provided for EAGLE")
        self.num_eagle_layers = self.max_draft_len
        self.max_total_draft_tokens = self.max_draft_len
        return self


class Eagle3DecodingConfig(EagleDecodingConfig):
    decoding_type: Literal["Eagle3"] = "Eagle3"  # type: ignore[assignment]


SpeculativeConfig = Annotated[
    EagleDecodingConfig | Eagle3DecodingConfig, Field(discriminator="decoding_type")
]

# BaseLlmArgs fields the fake does not model (names as in the source read).
_BASE_NAMES = (
    "tokenizer",
    "tokenizer_mode",
    "custom_tokenizer",
    "skip_tokenizer_init",
    "trust_remote_code",
    "dtype",
    "revision",
    "tokenizer_revision",
    "model_kwargs",
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
    "enable_lora",
    "lora_config",
    "enable_chunked_prefill",
    "guided_decoding_backend",
    "batched_logits_processor",
    "iter_stats_max_iterations",
    "request_stats_max_iterations",
    "peft_cache_config",
    "scheduler_config",
    "sparse_attention_config",
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
    "return_perf_metrics",
    "perf_metrics_max_requests",
    "orchestrator_type",
    "env_overrides",
)
# TorchLlmArgs' own fields the fake does not model.
_TORCH_NAMES = (
    "garbage_collection_gen0_threshold",
    "cuda_graph_config",
    "attention_dp_config",
    "nvfp4_gemm_config",
    "attn_backend",
    "sampler_type",
    "sampler_force_async_worker",
    "enable_iter_req_stats",
    "print_iter_log",
    "batch_wait_timeout_ms",
    "batch_wait_timeout_iters",
    "batch_wait_max_tokens_ratio",
    "torch_compile_config",
    "enable_autotuner",
    "enable_layerwise_nvtx_marker",
    "load_format",
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
    "use_cute_dsl_blockscaling_mm",
    "use_cute_dsl_blockscaling_bmm",
    "disable_flashinfer_sampling",
    "max_stats_len",
    "layer_wise_benchmarks_config",
)


class _TorchLlmArgsRead(StrictBaseModel):
    """The TorchLlmArgs fields the fake reads, typed as the source types them."""

    model: str | Path
    tensor_parallel_size: int = 1
    kv_cache_config: KvCacheConfig = Field(default_factory=KvCacheConfig)
    cache_transceiver_config: CacheTransceiverConfig | None = None
    speculative_config: SpeculativeConfig | None = None
    moe_config: MoeConfig = Field(default_factory=MoeConfig)
    disable_overlap_scheduler: bool = False
    enable_iter_perf_stats: bool = False
    mpi_session: Any = Field(default=None, alias="_mpi_session")
    backend: Literal["pytorch"] = "pytorch"

    @model_validator(mode="after")
    def _eagle_is_eagle3_on_pytorch(self) -> _TorchLlmArgsRead:
        speculative = self.speculative_config
        if type(speculative) is EagleDecodingConfig:
            data = speculative.model_dump(exclude={"decoding_type"})
            self.speculative_config = Eagle3DecodingConfig(**data)
        return self

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> Any:
        return cls(**kwargs)


TorchLlmArgs: Any = create_model(
    "TorchLlmArgs",
    __base__=_TorchLlmArgsRead,
    **{name: (Any, None) for name in (*_BASE_NAMES, *_TORCH_NAMES)},
)
LlmArgs = TorchLlmArgs


def llm_argument_names() -> frozenset[str]:
    """What ``LLM.__init__`` accepts as keywords: the fields, ``_mpi_session``, ``backend``."""
    return frozenset(TorchLlmArgs.model_fields) | {"_mpi_session", "backend"}


_FIELD_MAPPING: dict[str, type[StrictBaseModel]] = {
    "moe_config": MoeConfig,
    "kv_cache_config": KvCacheConfig,
}


def update_llm_args_with_extra_dict(
    llm_args: dict[str, Any],
    llm_args_dict: dict[str, Any],
    extra_llm_api_options: str | None = None,
) -> dict[str, Any]:
    """A partial ``kv_cache_config`` is merged into the base one; the mapped config
    fields become objects (the source also maps quant, calib, build, decoding, build
    cache, LoRA, NVFP4 GEMM and attention-DP configs, which the fake does not model)."""
    extra = dict(llm_args_dict)
    if "kv_cache_config" in llm_args and "kv_cache_config" in extra:
        base = llm_args["kv_cache_config"]
        if isinstance(base, KvCacheConfig):
            base = base.model_dump(exclude_unset=True)
        extra["kv_cache_config"] = base | extra["kv_cache_config"]
    for name, config_type in _FIELD_MAPPING.items():
        if name in extra:
            extra[name] = config_type(**extra[name])
    return llm_args | extra
