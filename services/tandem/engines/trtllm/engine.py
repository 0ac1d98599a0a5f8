"""The trtllm engine: Tandem's AsyncEngine on top of TensorRT-LLM's LLM API.

Prefill workers submit *context-only* requests: TensorRT-LLM computes the prompt's KV,
samples the first token, keeps the KV for its cache transceiver and returns
``DisaggregatedParams``; we ship those to the decode worker in ``PrefillResult.opaque``.
Decode workers submit the same prompt as a *generation-only* request carrying those
params: their transceiver pulls the KV from the prefill worker (NIXL/UCX, RDMA on GPU
clusters) and generation continues. TensorRT-LLM streams the generation-only output
*including* the first token, which Tandem already delivered, so we skip it.

Signatures used are TensorRT-LLM 1.2.1's (see ``api.py`` and ``version.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from tandem.api.v1alpha1 import PoolRole
from tandem.engines.base import (
    EngineError,
    EngineInfo,
    EngineStats,
    FinishReason,
    KvLayout,
    PrefillResult,
    SamplingParams,
    StepOutput,
)
from tandem.engines.trtllm.api import LlmLike, RequestOutputLike, TrtllmApi, load_trtllm
from tandem.engines.trtllm.handoff import decode_handoff, encode_handoff
from tandem.engines.trtllm.kv_events import TrtllmKvEventTranslator
from tandem.engines.trtllm.options import TrtllmEngineOptions
from tandem.engines.trtllm.stats import engine_stats_from_iteration, parse_iteration_stats
from tandem.engines.trtllm.version import release_of
from tandem.kv.events import KvCacheEvent

logger = logging.getLogger(__name__)

_FINISH_REASONS = {
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "cancelled": FinishReason.CANCELLED,
}
# Longest a stats poll may take in total, however full TensorRT-LLM's stats queue is.
_STATS_DRAIN_LIMIT_S = 1.0
_SHUTDOWN_TIMEOUT_S = 120.0


class RequestAborted(EngineError):
    """The request was cancelled before it produced its result."""


class TrtllmEngine:
    """One TensorRT-LLM instance (a whole TP/EP group) serving one pool role."""

    def __init__(
        self,
        options: TrtllmEngineOptions,
        *,
        loader: Callable[[], TrtllmApi] = load_trtllm,
    ) -> None:
        self._options = options
        self._loader = loader
        self._api: TrtllmApi | None = None
        self._llm: LlmLike | None = None
        self._running: dict[str, RequestOutputLike] = {}
        self._last_stats = EngineStats(0, 0, 0, options.kv_block_size)
        self._kv_events = (
            TrtllmKvEventTranslator(options.kv_block_size, options.max_context)
            if _publishes_kv_events(options.llm_args)
            else None
        )
        self.info = EngineInfo(
            model_name=options.model_name,
            vocab_size=options.vocab_size,
            max_context=options.max_context,
            kv_block_size=options.kv_block_size,
            eos_token_id=options.eos_token_id,
            extra={"engine": "trtllm", "role": options.role.value, "kv_handoff": "engine"},
        )

    @property
    def role(self) -> PoolRole:
        return self._options.role

    async def start(self) -> None:
        if self._llm is not None:
            return
        api = self._loader()
        logger.info(
            "loading %s with TensorRT-LLM %s as a %s worker",
            self._options.model,
            api.version,
            self.role.value,
        )
        try:
            # Validates too: it builds KvCacheConfig, MoeConfig... from their dicts.
            llm_args = api.update_llm_args({}, dict(self._options.llm_args))
            self._llm = await asyncio.wait_for(
                asyncio.to_thread(api.llm, self._options.model, **llm_args),
                timeout=self._options.load_timeout_s,
            )
        except TimeoutError:
            raise EngineError(
                f"TensorRT-LLM did not load {self._options.model} within "
                f"{self._options.load_timeout_s:g} s"
            ) from None
        except (ValueError, TypeError, RuntimeError) as error:
            raise EngineError(f"TensorRT-LLM refused its options: {error}") from error
        self._api = api
        self.info.extra["trtllm_version"] = api.version

    async def prefill(
        self, request_id: str, prompt: Sequence[int], sampling: SamplingParams
    ) -> PrefillResult:
        api, llm = self._started()
        if self.role is not PoolRole.PREFILL:
            raise EngineError("context-only requests run on prefill workers")
        self._check_request(request_id, prompt)
        output = llm.generate_async(
            list(prompt),
            sampling_params=self._sampling(api, sampling),
            streaming=False,
            disaggregated_params=api.disaggregated_params(request_type="context_only"),
        )
        self._running[request_id] = output
        try:
            result = await asyncio.wait_for(
                output.aresult(), timeout=self._options.request_timeout_s
            )
        except TimeoutError:
            output.abort()
            raise EngineError(
                f"prefill of request {request_id} took longer than "
                f"{self._options.request_timeout_s:g} s"
            ) from None
        except asyncio.CancelledError:
            output.abort()
            raise
        except api.request_error as error:
            raise EngineError(f"TensorRT-LLM failed the prefill: {error}") from error
        finally:
            self._running.pop(request_id, None)
        return self._prefill_result(api, prompt, sampling, result)

    async def generate(
        self,
        request_id: str,
        prompt: Sequence[int],
        sampling: SamplingParams,
        handoff: PrefillResult | None = None,
    ) -> AsyncIterator[StepOutput]:
        api, llm = self._started()
        if handoff is not None and handoff.finish_reason is not None:
            return  # the first token already ended the request
        if handoff is None and self.role is not PoolRole.DECODE:
            raise EngineError("prefill workers only run context-only requests")
        self._check_request(request_id, prompt)
        params, skip = self._generation_params(api, handoff)
        output = llm.generate_async(
            list(prompt),
            sampling_params=self._sampling(api, sampling),
            streaming=True,
            disaggregated_params=params,
        )
        self._running[request_id] = output
        finished = False
        consumed = 0
        try:
            steps = aiter(output)
            while not finished:
                try:
                    step = await asyncio.wait_for(
                        anext(steps), timeout=self._options.request_timeout_s
                    )
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    raise EngineError(
                        f"no token for request {request_id} within "
                        f"{self._options.request_timeout_s:g} s"
                    ) from None
                completion = step.outputs[0]
                tokens = list(completion.token_ids)
                new, consumed = tokens[consumed:], len(tokens)
                finished = step.finished
                reason = _finish_reason(completion.finish_reason) if finished else None
                first_new = consumed - len(new)
                kept = [t for i, t in enumerate(new) if first_new + i >= skip]
                for index, token in enumerate(kept):
                    last = finished and index == len(kept) - 1
                    yield StepOutput(request_id, token, reason if last else None)
        except api.request_error as error:
            raise EngineError(f"TensorRT-LLM failed the request: {error}") from error
        finally:
            if not finished:
                output.abort()
            self._running.pop(request_id, None)

    async def cancel(self, request_id: str) -> None:
        output = self._running.get(request_id)
        if output is not None:
            output.abort()

    async def release(self, request_id: str) -> None:
        # TensorRT-LLM 1.2.1 frees a context request's KV itself once its cache
        # transceiver has sent it, or after cache_transceiver_config.kv_transfer_timeout_ms
        # (rendered from kvTransfer.timeoutSeconds); the LLM API has no call to free it early.
        logger.debug("release of %s: TensorRT-LLM frees transferred KV itself", request_id)

    async def stats(self) -> EngineStats:
        if self._llm is None:
            return self._last_stats
        latest = None
        try:
            async with asyncio.timeout(_STATS_DRAIN_LIMIT_S):
                async for item in self._llm.get_stats_async(timeout=self._options.stats_timeout_s):
                    latest = parse_iteration_stats(item) or latest
        except (TimeoutError, asyncio.QueueEmpty):
            # An empty stats queue ends the read (as TimeoutError or QueueEmpty depending
            # on the release); keep what was read, the queue refills every iteration.
            pass
        if latest is not None:
            self._last_stats = engine_stats_from_iteration(
                latest, kv_block_size=self._options.kv_block_size
            )
        return self._last_stats

    async def poll_kv_events(self) -> list[KvCacheEvent]:
        """TensorRT-LLM's KV cache events since the last call, in Tandem's names
        (``kv_events.py``); [] unless ``kv_cache_config.event_buffer_max_size`` > 0."""
        if self._llm is None or self._kv_events is None:
            return []
        raw: list[Any] = []
        try:
            async with asyncio.timeout(_STATS_DRAIN_LIMIT_S):
                async for item in self._llm.get_kv_cache_events_async(
                    timeout=self._options.stats_timeout_s
                ):
                    raw.append(item)
        except (TimeoutError, asyncio.QueueEmpty):
            pass  # an empty queue ends the read, as for stats
        return self._kv_events.translate(raw)

    async def close(self) -> None:
        llm, self._llm = self._llm, None
        for output in list(self._running.values()):
            output.abort()
        self._running.clear()
        if llm is not None:
            await asyncio.wait_for(asyncio.to_thread(llm.shutdown), _SHUTDOWN_TIMEOUT_S)

    def _started(self) -> tuple[TrtllmApi, LlmLike]:
        if self._api is None or self._llm is None:
            raise EngineError("the trtllm engine is not started (call start() first)")
        return self._api, self._llm

    def _check_request(self, request_id: str, prompt: Sequence[int]) -> None:
        if request_id in self._running:
            raise EngineError(f"request {request_id} is already running")
        if not prompt:
            raise EngineError("the prompt is empty")
        if len(prompt) >= self.info.max_context:
            raise EngineError(
                f"the prompt has {len(prompt)} tokens; this engine holds at most "
                f"{self.info.max_context} including the answer"
            )

    def _sampling(self, api: TrtllmApi, sampling: SamplingParams) -> Any:
        # ``sampling.priority`` stays unmapped: TensorRT-LLM 1.2.1's LLM API has no request
        # priority. ``LLM.generate_async`` (tensorrt_llm/llmapi/llm.py; the fake in
        # tests/fakes/tensorrt_llm mirrors its 1.2.1 signature) takes none, and
        # ``SchedulingParams`` (tensorrt_llm/scheduling_params.py) places a request on an
        # attention-DP rank, nothing more. Its executor keeps its own arrival order; the
        # frontend's dispatch gate is what keeps a light tenant out of a backlog there.
        greedy = sampling.temperature == 0.0
        return api.sampling_params(
            max_tokens=sampling.max_tokens,
            temperature=None if greedy else sampling.temperature,
            top_k=1 if greedy else None,
            top_p=None if greedy else sampling.top_p,
            seed=sampling.seed,
            end_id=self.info.eos_token_id,
            stop_token_ids=list(sampling.stop_token_ids) or None,
            detokenize=False,
        )

    def _generation_params(self, api: TrtllmApi, handoff: PrefillResult | None) -> tuple[Any, int]:
        """DisaggregatedParams for a generation-only request, and how many leading
        tokens of its output the prefill worker already delivered."""
        if handoff is None:
            return None, 0
        decoded = decode_handoff(handoff.opaque)
        if release_of(decoded.trtllm_version) != release_of(api.version):
            raise EngineError(
                f"the prefill worker runs TensorRT-LLM {decoded.trtllm_version} and this "
                f"decode worker {api.version}; both pools must run the same release"
            )
        if decoded.first_gen_tokens[0] != handoff.first_token:
            raise EngineError("the handoff's first token differs from the prefill result's")
        known = api.disaggregated_fields
        unsupported = sorted(set(decoded.params) - known) if known else []
        if unsupported:
            raise EngineError(
                f"TensorRT-LLM {api.version} has no DisaggregatedParams field(s) "
                f"{', '.join(unsupported)} sent by the prefill worker"
            )
        params = api.disaggregated_params(request_type="generation_only", **decoded.params)
        return params, len(decoded.first_gen_tokens)

    def _prefill_result(
        self,
        api: TrtllmApi,
        prompt: Sequence[int],
        sampling: SamplingParams,
        result: RequestOutputLike,
    ) -> PrefillResult:
        if not result.outputs:
            raise EngineError("TensorRT-LLM returned no output for the prefill")
        completion = result.outputs[0]
        if completion.finish_reason == "cancelled":
            raise RequestAborted("the prefill was cancelled")
        if not completion.token_ids:
            raise EngineError("TensorRT-LLM returned no first token for the prefill")
        if completion.disaggregated_params is None:
            raise EngineError(
                "TensorRT-LLM returned no disaggregated params for a context-only request; "
                "is cache_transceiver_config set on this worker?"
            )
        first = int(completion.token_ids[0])
        finish = None
        if first in sampling.stop_token_ids or first == self.info.eos_token_id:
            finish = FinishReason.STOP
        elif sampling.max_tokens <= 1:
            finish = FinishReason.LENGTH
        return PrefillResult(
            first_token=first,
            num_prompt_tokens=len(prompt),
            # The KV stays in TensorRT-LLM; its cache transceiver moves it.
            kv=KvLayout(num_tokens=len(prompt), ranges=()),
            opaque=encode_handoff(completion.disaggregated_params, trtllm_version=api.version),
            finish_reason=finish,
        )


def _finish_reason(reason: str | None) -> FinishReason:
    if reason == "timeout":
        raise EngineError("TensorRT-LLM timed the request out")
    return _FINISH_REASONS.get(reason or "", FinishReason.STOP)


def create_engine(options: Mapping[str, object]) -> TrtllmEngine:
    """Registry entry point (``tandem.engines.registry``); call ``await start()`` next."""
    return TrtllmEngine(TrtllmEngineOptions.from_options(options))


def _publishes_kv_events(llm_args: Mapping[str, Any]) -> bool:
    """TensorRT-LLM emits KV events only with a positive event buffer and block reuse
    (its default) on."""
    kv_cache = llm_args.get("kv_cache_config")
    if not isinstance(kv_cache, Mapping):
        return False
    size = kv_cache.get("event_buffer_max_size", 0)
    return isinstance(size, int) and size > 0 and kv_cache.get("enable_block_reuse", True)
