"""``AsyncEngineDriver``: an ``AsyncEngine`` (TensorRT-LLM) behind ``EngineDriver``.

Such an engine schedules, batches and streams by itself and moves KV with its own cache
transceiver, so this driver is thin:

* prefill: ``await engine.prefill`` — the result carries no KV ranges, only ``opaque``
  (TensorRT-LLM's disaggregated params) for the decode worker;
* local decode: ``engine.generate(...)`` — its first step is the first token;
* remote decode: ``engine.generate(..., handoff=...)`` — the engine pulls the KV before
  it produces the next token, so a failure up to that first step is a failed handoff
  (``KvHandoffFailed``: the router prefills elsewhere) and the prefill worker is told to
  drop its lease once the step arrived;
* cancellation: closing a stream (or cancelling a prefill) aborts the engine request;
* stats: polled in the background (the engine's stats call is asynchronous and may
  wait), served from the latest snapshot;
* KV events: an engine with ``poll_kv_events()`` (TensorRT-LLM's own KV cache events,
  renamed as Tandem names blocks) is polled on the same period and what it reports is
  published to the worker's KV event stream -- the asynchronous counterpart of the
  synchronous engines' ``drain_kv_events()`` (``engine_runner.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Sequence
from typing import Any

from tandem.engines.base import (
    AsyncEngine,
    EngineError,
    EngineInfo,
    EngineStats,
    FinishReason,
    KvCapacityError,
    KvLayout,
    PrefillResult,
    SamplingParams,
    StepOutput,
)
from tandem.kv import LeaseTable
from tandem.kv.events import KvCacheEvent
from tandem.worker.client import WorkerClient
from tandem.worker.config import WorkerConfig
from tandem.worker.errors import (
    InvalidRequest,
    KvHandoffFailed,
    KvLayoutMismatch,
    WorkerBusy,
    WorkerCallError,
    WorkerError,
)
from tandem.worker.types import DecodeChunk, RemoteKvHandle

logger = logging.getLogger(__name__)

STATS_PERIOD_S = 0.5


class AsyncEngineDriver:
    def __init__(
        self,
        config: WorkerConfig,
        engine: AsyncEngine,
        leases: LeaseTable,
        client_for: Callable[[str], WorkerClient],
        *,
        stats_period_s: float = STATS_PERIOD_S,
        kv_event_sink: Callable[[Sequence[KvCacheEvent]], None] | None = None,
    ) -> None:
        self._config = config
        self._kv_event_sink = kv_event_sink
        self._engine = engine
        self._leases = leases
        self._client_for = client_for
        self._stats_period_s = stats_period_s
        self._stats = EngineStats(0, 0, 0, engine.info.kv_block_size)
        self._streams: set[str] = set()
        self._background: set[asyncio.Task[None]] = set()
        self._poller: asyncio.Task[None] | None = None

    @property
    def engine(self) -> object:
        return self._engine

    @property
    def info(self) -> EngineInfo:
        return self._engine.info

    async def start(self) -> None:
        await self._engine.start()  # idempotent: main may have loaded the model already
        self._stats = await self._engine.stats()
        self._poller = asyncio.create_task(self._poll_stats(), name="engine-stats")

    async def stop(self) -> None:
        tasks = [*self._background, *([self._poller] if self._poller else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._poller = None
        await self._engine.close()

    async def prefill(
        self, request_id: str, prompt: Sequence[int], sampling: SamplingParams
    ) -> PrefillResult:
        try:
            return await self._engine.prefill(request_id, prompt, sampling)
        except KvCapacityError as exc:
            raise WorkerBusy(str(exc)) from exc
        except EngineError as exc:
            raise InvalidRequest(str(exc)) from exc

    async def release(self, request_id: str) -> None:
        await self._engine.release(request_id)

    def release_soon(self, request_id: str) -> None:
        self._spawn(self._engine.release(request_id), f"release-{request_id}")

    async def open_local(
        self, request_id: str, prompt: Sequence[int], sampling: SamplingParams
    ) -> AsyncGenerator[DecodeChunk, None]:
        self._streams.add(request_id)
        steps = self._engine.generate(request_id, prompt, sampling)
        try:
            first = await _first_step(steps, request_id)
            if first is None:
                raise WorkerError(f"the engine produced no token for request {request_id}")
            yield DecodeChunk(
                token_ids=(first.token,),
                finish_reason=first.finish_reason,
                prompt_tokens=len(prompt),
                prefilled_locally=True,
            )
            if first.finish_reason is None:
                async for chunk in _follow(steps, request_id):
                    yield chunk
        finally:
            self._streams.discard(request_id)
            await _close(steps)

    async def open_remote(
        self,
        request_id: str,
        prompt: Sequence[int],
        sampling: SamplingParams,
        remote: RemoteKvHandle,
        first_token: int,
        finish: FinishReason | None,
    ) -> AsyncGenerator[DecodeChunk, None]:
        if not remote.opaque:
            raise KvLayoutMismatch(
                f"request {request_id}: the prefill worker {remote.worker_id} handed over KV "
                f"ranges ({remote.backend}) but this worker's engine moves KV itself and needs "
                "its handle: do both pools run the same engine?"
            )
        own = (remote.worker_id, remote.incarnation) == (
            self._config.worker_id,
            self._config.incarnation,
        )
        head = DecodeChunk(
            token_ids=(first_token,),
            finish_reason=finish,
            prompt_tokens=len(prompt),
            prefilled_locally=False,
        )
        if finish is not None:
            self._hand_back(remote, request_id, own)
            yield head
            return
        self._streams.add(request_id)
        handoff = PrefillResult(
            first_token=first_token,
            num_prompt_tokens=len(prompt),
            kv=KvLayout(num_tokens=len(prompt), ranges=()),
            opaque=remote.opaque,
        )
        steps = self._engine.generate(request_id, prompt, sampling, handoff=handoff)
        try:
            try:
                first = await _first_step(steps, request_id)
            except InvalidRequest as exc:
                # Up to its first step the engine was fetching the KV: a failure here is a
                # failed handoff, and another worker (or a local prefill) can still serve.
                raise KvHandoffFailed(
                    f"request {request_id}: the engine could not continue the sequence "
                    f"prefilled on {remote.worker_id}: {exc.message}"
                ) from exc
            finally:
                self._hand_back(remote, request_id, own)
            if first is None:  # ended without a new token: the first one was the last
                yield DecodeChunk(head.token_ids, FinishReason.STOP, head.prompt_tokens)
                return
            yield head
            yield DecodeChunk((first.token,), first.finish_reason)
            if first.finish_reason is None:
                async for chunk in _follow(steps, request_id):
                    yield chunk
        finally:
            self._streams.discard(request_id)
            await _close(steps)

    def stats(self) -> EngineStats:
        return self._stats

    def forget_peer(self, address: str) -> None:
        """Nothing cached per peer: the engine's transceiver owns its connections."""

    def active_sequences(self) -> int:
        return len(self._streams)

    # -- helpers --------------------------------------------------------------------

    def _hand_back(self, remote: RemoteKvHandle, request_id: str, own: bool) -> None:
        """The prefill side may drop its lease: the KV moved (or never will)."""
        if own:
            self._leases.release(request_id)
            self.release_soon(request_id)
            return
        self._spawn(self._release_remote(remote, request_id), f"release-remote-{request_id}")

    async def _release_remote(self, remote: RemoteKvHandle, request_id: str) -> None:
        client = self._client_for(remote.grpc_address)
        try:
            await client.release(request_id, timeout_s=self._config.rpc_timeout_s)
        except WorkerCallError as exc:
            # Its lease frees the KV anyway; this was only the early exit.
            logger.info("release of %s on %s failed: %s", request_id, remote.worker_id, exc)

    async def _poll_stats(self) -> None:
        while True:
            await asyncio.sleep(self._stats_period_s)
            try:
                self._stats = await self._engine.stats()
            except EngineError as exc:
                logger.warning("engine stats unavailable: %s", exc)
            await self._poll_kv_events()

    async def _poll_kv_events(self) -> None:
        poll = getattr(self._engine, "poll_kv_events", None)
        if poll is None or self._kv_event_sink is None:
            return
        try:
            events: list[KvCacheEvent] = await poll()
        except EngineError as exc:
            logger.warning("engine KV events unavailable: %s", exc)
            return
        if events:
            self._kv_event_sink(events)

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._background.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("background call %s failed: %r", task.get_name(), task.exception())


async def _first_step(steps: AsyncIterator[StepOutput], request_id: str) -> StepOutput | None:
    try:
        return await anext(steps)
    except StopAsyncIteration:
        return None
    except KvCapacityError as exc:
        raise WorkerBusy(str(exc)) from exc
    except EngineError as exc:
        raise InvalidRequest(f"request {request_id}: {exc}") from exc


async def _follow(
    steps: AsyncIterator[StepOutput], request_id: str
) -> AsyncGenerator[DecodeChunk, None]:
    """The rest of a stream, one chunk per step; a stream that stops without a finish
    reason ended on the engine's side (treated as STOP, as the engine seam documents)."""
    try:
        async for step in steps:
            yield DecodeChunk((step.token,), step.finish_reason)
            if step.finish_reason is not None:
                return
    except KvCapacityError as exc:
        raise WorkerBusy(f"KV cache exhausted while decoding: {exc}") from exc
    except EngineError as exc:
        raise WorkerError(f"decode step failed for request {request_id}: {exc}") from exc
    yield DecodeChunk((), FinishReason.STOP)


async def _close(steps: AsyncIterator[StepOutput]) -> None:
    """Close an engine stream: an unfinished request is aborted by the engine."""
    closer = getattr(steps, "aclose", None)
    if closer is not None:
        with contextlib.suppress(EngineError):
            await closer()
