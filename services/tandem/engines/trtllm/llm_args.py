"""The LLM API option names of TensorRT-LLM 1.2.1, to reject typos before a pod starts.

``BaseLlmArgs`` is a pydantic model with ``extra="forbid"`` and ``LLM.__init__`` refuses
any keyword that is not a ``TorchLlmArgs`` field, so an unknown key makes the worker
crash at startup; catching it while rendering turns that into a spec error. ``LLM``
uses the PyTorch backend (``LlmArgs = TorchLlmArgs``).

Where the names come from (``version.py`` has the full record): first a field-by-field
catalogue of the v1.2.1 wheel (third party), then checked name by name against
TensorRT-LLM's own ``tensorrt_llm/llmapi/llm_args.py`` in two stored versions that
bracket 1.2.1 (a 1.1-era one and a post-release/1.2 main one). Every name below is a
field in TensorRT-LLM's source; one is placed differently by the two versions
(``fail_fast_on_attention_window_too_large``: ``BaseLlmArgs`` in the older one, only
``TrtLlmArgs`` in the newer), so 1.2.1's PyTorch ``LLM`` may refuse it -- with the
worker's one-line "refused its options" error, not a silent misconfiguration.
"""

from __future__ import annotations

BASE_LLM_ARGS = frozenset(
    {
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
)

TORCH_LLM_ARGS = frozenset(
    {
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
)

LLM_ARGS = BASE_LLM_ARGS | TORCH_LLM_ARGS

# Nested configs Tandem renders itself, so their keys are checked too.
KV_CACHE_CONFIG = frozenset(
    {
        "enable_block_reuse",
        "max_tokens",
        "max_attention_window",
        "sink_token_length",
        "free_gpu_memory_fraction",
        "host_cache_size",
        "onboard_blocks",
        "cross_kv_cache_fraction",
        "secondary_offload_min_priority",
        "event_buffer_max_size",
        "attention_dp_events_gather_period_ms",
        "enable_partial_reuse",
        "copy_on_partial_reuse",
        "use_uvm",
        "max_gpu_total_bytes",
        "dtype",
        "mamba_ssm_cache_dtype",
        "tokens_per_block",
    }
)

CACHE_TRANSCEIVER_CONFIG = frozenset(
    {
        "backend",
        "max_tokens_in_buffer",
        "kv_transfer_timeout_ms",
        "kv_transfer_sender_future_timeout_ms",
    }
)
CACHE_TRANSCEIVER_BACKENDS = frozenset({"DEFAULT", "UCX", "NIXL", "MOONCAKE", "MPI"})

MOE_CONFIG = frozenset(
    {
        "backend",
        "max_num_tokens",
        "load_balancer",
        "disable_finalize_fusion",
        "use_low_precision_moe_combine",
    }
)
# Without "AUTO": it reached TensorRT-LLM's main on 2026-01-30 (PR #11074), 1.2.1 comes
# from the release/1.2 branch, and the 1.2.1 catalogue lacks it; both source versions
# read list the other seven.
MOE_BACKENDS = frozenset(
    {"CUTLASS", "CUTEDSL", "WIDEEP", "TRTLLM", "DEEPGEMM", "VANILLA", "TRITON"}
)

NESTED_FIELDS = {
    "kv_cache_config": KV_CACHE_CONFIG,
    "cache_transceiver_config": CACHE_TRANSCEIVER_CONFIG,
    "moe_config": MOE_CONFIG,
}

# KvCacheConfig defaults, as in the 1.2.1 catalogue and the newer source version read.
DEFAULT_TOKENS_PER_BLOCK = 32
DEFAULT_FREE_GPU_MEMORY_FRACTION = 0.9
# BaseLlmArgs.max_num_tokens default (likewise).
DEFAULT_MAX_NUM_TOKENS = 8192
