"""Mirrors tensorrt_llm/executor (v1.2.1): result types and RequestError."""

from tensorrt_llm.executor.result import CompletionOutput, GenerationResult, IterationResult
from tensorrt_llm.executor.utils import RequestError

__all__ = ["CompletionOutput", "GenerationResult", "IterationResult", "RequestError"]
