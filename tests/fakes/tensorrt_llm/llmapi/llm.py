"""Mirrors tensorrt_llm/llmapi/llm.py (v1.2.1): ``LLM`` and ``RequestOutput``.

Signatures kept: ``LLM.__init__(model, tokenizer=None, tokenizer_mode='auto',
skip_tokenizer_init=False, trust_remote_code=False, tensor_parallel_size=1,
dtype='auto', revision=None, tokenizer_revision=None, **kwargs)``,
``generate_async(inputs, sampling_params=None, lora_request=None,
prompt_adapter_request=None, streaming=False, kv_cache_retention_config=None,
disaggregated_params=None, trace_headers=None, _postproc_params=None,
scheduling_params=None, cache_salt=None)``, ``get_stats_async(timeout=2)``,
``shutdown()``.

Failure modes reproduced loudly where the real engine deadlocks, OOMs or crashes:
a context-only request on an instance whose overlap scheduler is on, a prompt longer
than ``cache_transceiver_config.max_tokens_in_buffer``, disaggregated requests without a
cache transceiver, generation-only requests whose KV is missing or whose transceiver
backend differs from the context side's.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from pathlib import Path
from typing import Any

from tensorrt_llm._fabric import TRANSCEIVER, ParkedKv, new_endpoint, new_opaque_state, next_token
from tensorrt_llm.disaggregated_params import DisaggregatedParams
from tensorrt_llm.executor.result import GenerationResult, IterationResult, _Update
from tensorrt_llm.llmapi.llm_args import TorchLlmArgs
from tensorrt_llm.sampling_params import SamplingParams

# Mirrors llm.py: RequestOutput is the GenerationResult users receive.
RequestOutput = GenerationResult

_DEFAULT_KV_TOKENS = 65_536


class LLM:
    def __init__(
        self,
        model: str | Path,
        tokenizer: object | None = None,
        tokenizer_mode: str = "auto",
        skip_tokenizer_init: bool = False,
        trust_remote_code: bool = False,
        tensor_parallel_size: int = 1,
        dtype: str = "auto",
        revision: str | None = None,
        tokenizer_revision: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.args = TorchLlmArgs.from_kwargs(
            model=model,
            tokenizer=tokenizer,
            tokenizer_mode=tokenizer_mode,
            skip_tokenizer_init=skip_tokenizer_init,
            trust_remote_code=trust_remote_code,
            tensor_parallel_size=tensor_parallel_size,
            dtype=dtype,
            revision=revision,
            tokenizer_revision=tokenizer_revision,
            **kwargs,
        )
        kv = self.args.get("kv_cache_config")
        self._tokens_per_block = kv.tokens_per_block
        self._total_blocks = (kv.max_tokens or _DEFAULT_KV_TOKENS) // self._tokens_per_block
        self._endpoint = new_endpoint()
        self._ids = itertools.count(1)
        self._running: dict[int, tuple[GenerationResult, int]] = {}
        self._queued = 0
        self._stats: list[dict[str, object]] = []
        self._aborted: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.shut_down = False
        # Fake-only test hook: messages of errors the next requests fail with.
        self.fail_next: list[str] = []

    def generate_async(
        self,
        inputs: list[int] | str,
        sampling_params: SamplingParams | None = None,
        lora_request: object | None = None,
        prompt_adapter_request: object | None = None,
        streaming: bool = False,
        kv_cache_retention_config: object | None = None,
        disaggregated_params: DisaggregatedParams | None = None,
        trace_headers: object | None = None,
        _postproc_params: object | None = None,
        scheduling_params: object | None = None,
        cache_salt: str | None = None,
    ) -> RequestOutput:
        if self.shut_down:
            raise RuntimeError("LLM is shut down")
        if not isinstance(inputs, list) or not all(isinstance(t, int) for t in inputs):
            raise TypeError("the fake only takes token ids")
        sampling = sampling_params or SamplingParams()
        request_id = next(self._ids)
        result = GenerationResult(
            request_id, list(inputs), streaming=streaming, on_abort=self._aborted.add
        )
        self._queued += 1
        task = asyncio.get_running_loop().create_task(
            self._serve(result, sampling, streaming, disaggregated_params)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return result

    def get_stats_async(self, timeout: float | None = 2) -> IterationResult:
        return IterationResult(self._stats, timeout)

    def shutdown(self) -> None:
        self.shut_down = True
        for task in self._tasks:
            task.cancel()

    # The fake executor ------------------------------------------------------------------

    async def _serve(
        self,
        result: GenerationResult,
        sampling: SamplingParams,
        streaming: bool,
        params: DisaggregatedParams | None,
    ) -> None:
        await asyncio.sleep(0)  # waits one scheduler iteration in the queue
        self._queued -= 1
        kind = params.request_type if params is not None else "context_and_generation"
        try:
            if self.fail_next:
                raise _Failed(self.fail_next.pop(0))
            if result.request_id in self._aborted:  # aborted while queued
                result._push(_Update((), True, "cancelled"))
                return
            if kind == "context_only":
                self._context_only(result, sampling)
                return
            tokens = self._generation_start(result, params) if kind == "generation_only" else []
            await self._generate(result, sampling, streaming, tokens)
        except _Failed as failure:
            result._push(_Update((), True, error=str(failure)))
        finally:
            self._running.pop(result.request_id, None)
            self._aborted.discard(result.request_id)

    def _context_only(self, result: GenerationResult, sampling: SamplingParams) -> None:
        transceiver = self._transceiver_config()
        if not self.args.get("disable_overlap_scheduler"):
            raise _Failed("context-only requests need disable_overlap_scheduler=True")
        prompt = result.prompt_token_ids
        limit = transceiver.max_tokens_in_buffer
        if limit is not None and len(prompt) > limit:
            raise _Failed(f"KV of {len(prompt)} tokens does not fit max_tokens_in_buffer={limit}")
        first = next_token(prompt)
        opaque = new_opaque_state()
        TRANSCEIVER.park(
            self._endpoint,
            result.request_id,
            ParkedKv(
                prompt=tuple(prompt),
                first_tokens=(first,),
                opaque_state=opaque,
                backend=transceiver.backend or "DEFAULT",
                blocks=math.ceil(len(prompt) / self._tokens_per_block),
            ),
        )
        handoff = DisaggregatedParams(
            request_type="context_only",
            first_gen_tokens=[first],
            ctx_request_id=result.request_id,
            opaque_state=opaque,
            ctx_dp_rank=0,
            ctx_info_endpoint=self._endpoint,
        )
        self._record_stats()
        result._push(_Update((first,), True, None, handoff))

    def _generation_start(
        self, result: GenerationResult, params: DisaggregatedParams | None
    ) -> list[int]:
        transceiver = self._transceiver_config()
        assert params is not None
        if params.ctx_request_id is None or params.ctx_info_endpoint is None:
            raise _Failed("generation-only request without context request id / endpoint")
        parked = TRANSCEIVER.pull(params.ctx_info_endpoint, params.ctx_request_id)
        if parked is None:
            raise _Failed(f"no KV parked for context request {params.ctx_request_id}")
        if parked.backend != (transceiver.backend or "DEFAULT"):
            raise _Failed(
                f"cache transceiver backends differ: {parked.backend} vs {transceiver.backend}"
            )
        if params.opaque_state != parked.opaque_state:
            raise _Failed("opaque_state does not match the parked KV")
        if tuple(result.prompt_token_ids) != parked.prompt:
            raise _Failed("generation-only prompt differs from the context request's")
        if list(params.first_gen_tokens or []) != list(parked.first_tokens):
            raise _Failed("first_gen_tokens differ from the context request's")
        return list(parked.first_tokens)

    async def _generate(
        self,
        result: GenerationResult,
        sampling: SamplingParams,
        streaming: bool,
        tokens: list[int],
    ) -> None:
        self._running[result.request_id] = (result, len(result.prompt_token_ids))
        stop = set(sampling.stop_token_ids or ())
        if sampling.end_id is not None and not sampling.ignore_eos:
            stop.add(sampling.end_id)
        pending: list[int] = list(tokens)  # a generation-only output echoes first tokens
        sequence = list(result.prompt_token_ids) + tokens
        reason = "length"
        while len(tokens) < sampling.max_tokens:
            if tokens and tokens[-1] in stop:
                reason = "stop"
                break
            await asyncio.sleep(0)  # one iteration
            if result.request_id in self._aborted:
                result._push(_Update(tuple(pending), True, "cancelled"))
                return
            token = next_token(sequence)
            sequence.append(token)
            tokens.append(token)
            pending.append(token)
            self._running[result.request_id] = (result, len(sequence))
            self._record_stats()
            if streaming and len(tokens) < sampling.max_tokens and token not in stop:
                result._push(_Update(tuple(pending), False))
                pending.clear()
        if tokens and tokens[-1] in stop:
            reason = "stop"
        result._push(_Update(tuple(pending), True, reason))  # type: ignore[arg-type]

    def _transceiver_config(self) -> Any:
        config = self.args.get("cache_transceiver_config")
        if config is None:
            raise _Failed("disaggregated requests need cache_transceiver_config")
        return config

    def _record_stats(self) -> None:
        if not self.args.get("enable_iter_perf_stats"):
            return
        used = TRANSCEIVER.parked_blocks(self._endpoint) + sum(
            math.ceil(length / self._tokens_per_block) for _, length in self._running.values()
        )
        self._stats.append(
            {
                "iter": len(self._stats),
                "numActiveRequests": len(self._running),
                "numQueuedRequests": self._queued,
                "kvCacheStats": {
                    "maxNumBlocks": self._total_blocks,
                    "freeNumBlocks": max(0, self._total_blocks - used),
                    "usedNumBlocks": used,
                    "tokensPerBlock": self._tokens_per_block,
                },
            }
        )


class _Failed(Exception):
    """Internal: fails one request with RequestError on the consumer side."""
