"""Mirrors tensorrt_llm/llmapi/llm_utils.py (v1.2.1), which re-exports
``update_llm_args_with_extra_dict`` (trtllm-serve imports it from here)."""

from tensorrt_llm.llmapi.llm_args import update_llm_args_with_extra_dict

__all__ = ["update_llm_args_with_extra_dict"]
