"""The slice of TensorRT-LLM's Python API the adapter uses, typed, and its lazy loader.

``tensorrt_llm`` exists only inside NVIDIA's release images on GPU nodes, so nothing here
imports it at module level. The Protocols pin down what the adapter calls (signatures of
TensorRT-LLM 1.2.1; sources in ``version.py``):

* ``tensorrt_llm.LLM(model, **llm_args)`` — tensorrt_llm/llmapi/llm.py
* ``LLM.generate_async(inputs, sampling_params=None, lora_request=None,
  prompt_adapter_request=None, streaming=False, kv_cache_retention_config=None,
  disaggregated_params=None, ...) -> RequestOutput`` — llmapi/llm.py; we pass keywords only
* ``LLM.get_stats_async(timeout=2) -> IterationResult`` (async iterable of stats dicts),
  ``LLM.get_kv_cache_events_async(timeout=2) -> IterationResult`` (async iterable of KV
  event dicts, see ``kv_events.py``), ``LLM.shutdown()`` — llmapi/llm.py
* ``RequestOutput``: ``request_id``, ``outputs: list[CompletionOutput]``, ``finished``,
  ``abort()``, ``aresult()``, ``async for`` (each step yields the same, updated object)
  — executor/result.py
* ``CompletionOutput``: ``token_ids`` (all generated so far), ``finish_reason``
  (stop|length|timeout|cancelled|None), ``disaggregated_params`` — executor/result.py
* ``SamplingParams(max_tokens=, temperature=, top_p=, seed=, stop_token_ids=, ...)`` —
  tensorrt_llm/sampling_params.py (kw-only dataclass)
* ``DisaggregatedParams(request_type=, first_gen_tokens=, ctx_request_id=,
  opaque_state=, ...)`` — tensorrt_llm/disaggregated_params.py (kw-only dataclass)
* ``tensorrt_llm.llmapi.llm_utils.update_llm_args_with_extra_dict(llm_args, extra)`` —
  turns YAML-shaped nested dicts (speculative_config, moe_config, ...) into config
  objects, as ``trtllm-serve --extra_llm_api_options`` does
* ``tensorrt_llm.llmapi.RequestError`` — raised by a failed request
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from tandem.engines.base import EngineError
from tandem.engines.trtllm.version import PINNED_VERSION, RELEASE_IMAGE, is_pinned_release

logger = logging.getLogger(__name__)


class DisaggregatedParamsLike(Protocol):
    request_type: str | None
    first_gen_tokens: list[int] | None
    ctx_request_id: int | None
    opaque_state: bytes | None


class CompletionOutputLike(Protocol):
    @property
    def token_ids(self) -> Sequence[int]: ...

    @property
    def finish_reason(self) -> str | None: ...

    @property
    def disaggregated_params(self) -> DisaggregatedParamsLike | None: ...


class RequestOutputLike(Protocol):
    @property
    def outputs(self) -> Sequence[CompletionOutputLike]: ...

    @property
    def finished(self) -> bool: ...

    def abort(self) -> None: ...

    async def aresult(self) -> RequestOutputLike: ...

    def __aiter__(self) -> AsyncIterator[RequestOutputLike]: ...


class LlmLike(Protocol):
    def generate_async(
        self,
        inputs: list[int],
        sampling_params: Any = None,
        *,
        streaming: bool = False,
        disaggregated_params: Any = None,
    ) -> RequestOutputLike: ...

    def get_stats_async(self, timeout: float | None = 2) -> AsyncIterator[Any]: ...

    def get_kv_cache_events_async(self, timeout: float | None = 2) -> AsyncIterator[Any]: ...

    def shutdown(self) -> None: ...


@dataclass(frozen=True, slots=True)
class TrtllmApi:
    """Handles on the loaded ``tensorrt_llm`` module."""

    version: str
    llm: Callable[..., LlmLike]
    sampling_params: Callable[..., Any]
    disaggregated_params: Callable[..., Any]
    update_llm_args: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]
    request_error: type[Exception]

    @property
    def disaggregated_fields(self) -> frozenset[str]:
        """Keyword arguments ``DisaggregatedParams`` accepts in this version."""
        fields = getattr(self.disaggregated_params, "__dataclass_fields__", None)
        return frozenset(cast(Mapping[str, Any], fields)) if fields else frozenset()


def load_trtllm(module_name: str = "tensorrt_llm") -> TrtllmApi:
    """Import TensorRT-LLM, or fail with what to do about it."""
    try:
        module = importlib.import_module(module_name)
        llm_utils = importlib.import_module(f"{module_name}.llmapi.llm_utils")
        llmapi = importlib.import_module(f"{module_name}.llmapi")
    except ImportError as error:
        raise EngineError(
            f"the trtllm engine needs TensorRT-LLM {PINNED_VERSION}, which is not installed "
            f"here ({error}); run the worker from {RELEASE_IMAGE} on a GPU node"
        ) from error
    version = str(getattr(module, "__version__", "unknown"))
    if not is_pinned_release(version):
        logger.warning(
            "TensorRT-LLM %s found, Tandem is written against %s: option names or the "
            "disaggregated-params handoff may differ",
            version,
            PINNED_VERSION,
        )
    return TrtllmApi(
        version=version,
        llm=module.LLM,
        sampling_params=module.SamplingParams,
        disaggregated_params=module.DisaggregatedParams,
        update_llm_args=llm_utils.update_llm_args_with_extra_dict,
        request_error=llmapi.RequestError,
    )
