"""Mirrors tensorrt_llm/llmapi/__init__.py (v1.2.1): the names Tandem imports."""

from tensorrt_llm.disaggregated_params import DisaggregatedParams
from tensorrt_llm.executor.result import CompletionOutput
from tensorrt_llm.executor.utils import RequestError
from tensorrt_llm.llmapi.llm import LLM, RequestOutput
from tensorrt_llm.llmapi.llm_args import (
    CacheTransceiverConfig,
    EagleDecodingConfig,
    KvCacheConfig,
    MoeConfig,
)
from tensorrt_llm.sampling_params import SamplingParams

__all__ = [
    "LLM",
    "CacheTransceiverConfig",
    "CompletionOutput",
    "DisaggregatedParams",
    "EagleDecodingConfig",
    "KvCacheConfig",
    "MoeConfig",
    "RequestError",
    "RequestOutput",
    "SamplingParams",
]
