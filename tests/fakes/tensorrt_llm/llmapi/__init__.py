"""Mirrors tensorrt_llm/llmapi/__init__.py: the names Tandem and its tests import."""

from tensorrt_llm.disaggregated_params import DisaggregatedParams
from tensorrt_llm.executor.result import CompletionOutput
from tensorrt_llm.executor.utils import RequestError
from tensorrt_llm.llmapi.llm import LLM, RequestOutput
from tensorrt_llm.llmapi.llm_args import (
    CacheTransceiverConfig,
    Eagle3DecodingConfig,
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
    "Eagle3DecodingConfig",
    "EagleDecodingConfig",
    "KvCacheConfig",
    "MoeConfig",
    "RequestError",
    "RequestOutput",
    "SamplingParams",
]
