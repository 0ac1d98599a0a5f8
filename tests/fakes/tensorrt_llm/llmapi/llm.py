"""Mirrors tensorrt_llm/llmapi/llm.py (v1.2.1): ``LLM`` and ``RequestOutput``.

Signatures kept: ``LLM.__init__(model, tokenizer=None, tokenizer_mode='auto',
skip_tokenizer_init=False, trust_remote_code=False, tensor_parallel_size=1,
dtype='auto', revision=None, tokenizer_revision=None, **kwargs)``,
``generate_async(inputs, sampling_params=None, lora_request=None,
prompt_adapter_request=None, streaming=False, kv_cache_retention_config=None,
disaggregated_params=None, trace_headers=None, _postproc_params=None,
scheduling_params=None, cache_salt=None)``, ``get_stats_async(timeout=2)``,
``get_kv_cache_events(timeout=2)`` / ``get_kv_cache_events_async(timeout=2)``,
``shutdown()``.

KV cache events, as the real one emits them with ``KvCacheConfig(enable_block_reuse=
True, event_buffer_max_size=N > 0)`` (llm.py docstrings of ``get_kv_cache_events``):
one dict per event in ``KVCacheEventSerializer``'s shape (tensorrt_llm/_utils.py,
checked at commit 000a01de66f0 = 1.0.0rc4 and in later versions; ``window_size`` on
every event): a ``created`` event
first, ``stored`` for the full blocks of each finished prompt (block hashes are the
fake's own, as TensorRT-LLM's are its C++ hasher's), ``removed`` when the reusable pool
is full and the oldest block goes; at most ``event_buffer_max_size`` events wait, older
ones are dropped.

Failure modes reproduced loudly where the real engine deadlocks, OOMs or crashes:
a context-only request on an instance whose overlap scheduler is on, a prompt longer
than ``cache_transceiver_config.max_tokens_in_buffer``, disaggregated requests without a
cache transceiver, generation-only requests whose KV is missing or whose transceiver
backend differs from the context side's.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import math
from pathlib import Path
from typing import Any

from tensorrt_llm._fabric import TRANSCEIVER, ParkedKv, new_endpoint, new_opaque_state, next_token
from tensorrt_llm.disaggregated_params import DisaggregatedParams
from tensorrt_llm.executor.result import GenerationResult, IterationResult, _Update
from tensorrt_llm.llmapi.llm_args import TorchLlmArgs, llm_argument_names
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
        # As llm.py does: keywords are checked against the args' fields first.
        for key in kwargs:
            if key not in llm_argument_names():
                raise ValueError(f"{type(self).__name__} got invalid argument: {key}")
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
        kv = self.args.kv_cache_config
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
        # One attention window: the configured one, else the whole sequence.
        window = kv.max_attention_window[0] if kv.max_attention_window else self.args.max_seq_len
        self._events = _EventLog(kv, self._total_blocks, window or _DEFAULT_KV_TOKENS)
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

    def get_kv_cache_events(self, timeout: float | None = 2) -> list[dict[str, Any]]:
        return self._events.take()

    def get_kv_cache_events_async(self, timeout: float | None = 2) -> IterationResult:
        return IterationResult(self._events.take(), timeout)

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
        if not self.args.disable_overlap_scheduler:
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
        self._events.store(prompt)
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
        self._events.store(result.prompt_token_ids)
        result._push(_Update(tuple(pending), True, reason))  # type: ignore[arg-type]

    def _transceiver_config(self) -> Any:
        config = self.args.cache_transceiver_config
        if config is None:
            raise _Failed("disaggregated requests need cache_transceiver_config")
        return config

    def _record_stats(self) -> None:
        if not self.args.enable_iter_perf_stats:
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


class _EventLog:
    """The fake's reusable-block pool and the KV events it would report."""

    def __init__(self, kv_config: Any, capacity: int, window: int) -> None:
        self._enabled = kv_config.enable_block_reuse and kv_config.event_buffer_max_size > 0
        self._limit = kv_config.event_buffer_max_size
        self._block = kv_config.tokens_per_block
        self._capacity = capacity
        self._window = window
        self._reusable: dict[int, None] = {}  # block hashes, oldest first
        self._queue: list[dict[str, Any]] = []
        self._ids = itertools.count()
        self._emit({"type": "created", "num_blocks_per_cache_level": [capacity, 0]})

    def store(self, prompt: list[int]) -> None:
        parent: int | None = None
        new: list[dict[str, Any]] = []
        new_parent = None
        for start in range(0, len(prompt) - self._block + 1, self._block):
            tokens = prompt[start : start + self._block]
            block_hash = _block_key(parent, tokens)
            if block_hash not in self._reusable:
                if not new:
                    new_parent = parent
                new.append(
                    {
                        "type": "stored_block",
                        "block_hash": block_hash,
                        "tokens": [
                            {"type": "unique_token", "token_id": t, "token_extra_id": 0}
                            for t in tokens
                        ],
                        "cache_level": 0,
                        "priority": 35,
                    }
                )
                self._reusable[block_hash] = None
            parent = block_hash
        if new:
            self._emit({"type": "stored", "parent_hash": new_parent, "blocks": new})
        evicted = []
        while len(self._reusable) > self._capacity:
            oldest = next(iter(self._reusable))
            del self._reusable[oldest]
            evicted.append(oldest)
        if evicted:
            self._emit({"type": "removed", "block_hashes": evicted})

    def take(self) -> list[dict[str, Any]]:
        events, self._queue = self._queue, []
        return events

    def _emit(self, data: dict[str, Any]) -> None:
        if not self._enabled:
            return
        # KVCacheEventSerializer.to_json_str always writes window_size.
        event = {"event_id": next(self._ids), "data": data, "window_size": self._window}
        self._queue.append(event)
        del self._queue[: max(0, len(self._queue) - self._limit)]


def _block_key(parent: int | None, tokens: list[int]) -> int:
    """The fake's block hash: any stable 64-bit name that is not Tandem's."""
    data = repr((parent, tokens)).encode()
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "little")
