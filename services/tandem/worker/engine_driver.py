"""One face for both engine kinds: what ``WorkerService`` needs from "the engine".

The service owns the worker's policy (admission, leases, drain, metrics, the RPCs); a
driver owns how an engine runs a request:

* ``SyncEngineDriver`` — a synchronous ``Engine`` (reference) on its engine thread, driven
  by ``EngineLoop`` (one step over every decode and queued prefill chunk), KV pulled
  through Tandem's transport (``Handoff``).
* ``AsyncEngineDriver`` (``async_driver.py``) — an ``AsyncEngine`` (TensorRT-LLM) that
  schedules, streams and moves KV itself.

Decode streams are async generators: the first chunk carries the first generated token
(from the local prefill, or the prefill worker's), the last one a finish reason. Closing
the generator early (client gone) frees the sequence. Every error a driver raises is a
``WorkerError`` that names its gRPC status.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Protocol

from tandem.engines.base import (
    EngineError,
    EngineInfo,
    EngineLost,
    EngineStats,
    FinishReason,
    KvCapacityError,
    PrefillResult,
    SamplingParams,
)
from tandem.kv import KvTransport, LeaseTable
from tandem.kv.events import KvCacheEvent
from tandem.worker.client import WorkerClient
from tandem.worker.config import WorkerConfig
from tandem.worker.engine_runner import EngineRunner
from tandem.worker.errors import InvalidRequest, WorkerBusy, WorkerError
from tandem.worker.handoff import Handoff
from tandem.worker.peer_directory import PeerDirectory
from tandem.worker.scheduler import EngineLoop, StepItem
from tandem.worker.types import DecodeChunk, RemoteKvHandle


class EngineDriver(Protocol):
    """The engine as the service sees it (see the module docstring)."""

    @property
    def engine(self) -> object:
        """The wrapped engine (for tests and introspection only)."""
        ...

    @property
    def info(self) -> EngineInfo: ...

    async def start(self) -> None:
        """Make the engine ready to serve (register KV, load the model)."""
        ...

    async def stop(self) -> None: ...

    async def prefill(
        self, request_id: str, prompt: Sequence[int], sampling: SamplingParams
    ) -> PrefillResult:
        """Prefill for a decode worker elsewhere; the KV stays held until ``release``."""
        ...

    async def release(self, request_id: str) -> None:
        """Free a prefilled sequence's KV (idempotent)."""
        ...

    def release_soon(self, request_id: str) -> None:
        """``release`` without waiting (cleanup paths)."""
        ...

    def open_local(
        self, request_id: str, prompt: Sequence[int], sampling: SamplingParams
    ) -> AsyncGenerator[DecodeChunk, None]:
        """Prefill here, then stream the answer."""
        ...

    def open_remote(
        self,
        request_id: str,
        prompt: Sequence[int],
        sampling: SamplingParams,
        remote: RemoteKvHandle,
        first_token: int,
        finish: FinishReason | None,
    ) -> AsyncGenerator[DecodeChunk, None]:
        """Continue a sequence prefilled elsewhere (``first_token`` came with it;
        ``finish`` says whether it already ended the sequence). KV problems raise
        ``KvHandoffFailed`` before the first chunk."""
        ...

    def stats(self) -> EngineStats:
        """A recent snapshot; cheap (called on every Stats RPC and scrape)."""
        ...

    def forget_peer(self, address: str) -> None:
        """The worker at ``address`` left: drop what is cached about it."""
        ...

    def active_sequences(self) -> int: ...


class SyncEngineDriver:
    """A synchronous ``Engine`` behind its engine thread (see the module docstring)."""

    def __init__(
        self,
        config: WorkerConfig,
        runner: EngineRunner,
        transport: KvTransport,
        leases: LeaseTable,
        client_for: Callable[[str], WorkerClient],
        clock: Callable[[], float] = time.monotonic,
        on_quarantine: Callable[[int], None] = lambda _: None,
        on_kv_events: Callable[[Sequence[KvCacheEvent]], None] | None = None,
        on_engine_lost: Callable[[EngineLost], None] = lambda _: None,
    ) -> None:
        """``on_kv_events`` receives the engine's KV cache events (engine thread);
        ``on_engine_lost`` hears that the engine can serve nothing more."""
        runner.kv_event_sink = on_kv_events
        self._runner = runner
        self._transport = transport
        self._loop = EngineLoop(runner, on_engine_lost)
        self._peers = PeerDirectory(transport, client_for, config.rpc_timeout_s)
        self._handoff = Handoff(
            config, runner, transport, self._peers, leases, client_for, clock, on_quarantine
        )

    @property
    def engine(self) -> object:
        return self._runner.engine

    @property
    def info(self) -> EngineInfo:
        return self._runner.engine.info

    async def start(self) -> None:
        await self._transport.register(self._runner.engine.kv_regions())
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
        await self._handoff.stop()

    async def prefill(
        self, request_id: str, prompt: Sequence[int], sampling: SamplingParams
    ) -> PrefillResult:
        result = await self._prefill_here(request_id, prompt, sampling)
        if result.finish_reason is None and self.info.kv_ranks > 1:
            try:
                await self._loop.gather_kv(request_id)
            except BaseException:
                self.release_soon(request_id)
                raise
        return result

    async def _prefill_here(
        self, request_id: str, prompt: Sequence[int], sampling: SamplingParams
    ) -> PrefillResult:
        try:
            return await self._loop.prefill(request_id, prompt, sampling)
        except KvCapacityError as exc:
            raise WorkerBusy(str(exc)) from exc
        except EngineError as exc:
            raise InvalidRequest(str(exc)) from exc

    async def release(self, request_id: str) -> None:
        await self._runner.call(self._runner.engine.release, request_id)

    def release_soon(self, request_id: str) -> None:
        self._runner.call_soon(self._runner.engine.release, request_id)

    async def open_local(
        self, request_id: str, prompt: Sequence[int], sampling: SamplingParams
    ) -> AsyncGenerator[DecodeChunk, None]:
        result = await self._prefill_here(request_id, prompt, sampling)
        head = DecodeChunk(
            token_ids=(result.first_token,),
            finish_reason=result.finish_reason,
            prompt_tokens=result.num_prompt_tokens,
            prefilled_locally=True,
        )
        try:
            async for chunk in self._follow(request_id, sampling, head):
                yield chunk
        finally:
            self._forget(request_id)

    async def open_remote(
        self,
        request_id: str,
        prompt: Sequence[int],
        sampling: SamplingParams,
        remote: RemoteKvHandle,
        first_token: int,
        finish: FinishReason | None,
    ) -> AsyncGenerator[DecodeChunk, None]:
        pulled = await self._handoff.pull(request_id, prompt, remote, first_token)
        # From here on this stream owns the engine sequence and must free it.
        head = DecodeChunk(
            token_ids=(first_token,),
            finish_reason=finish,
            prompt_tokens=len(prompt),
            prefilled_locally=False,
            kv_bytes_transferred=pulled.nbytes,
            kv_transfer_seconds=pulled.seconds,
        )
        try:
            async for chunk in self._follow(request_id, sampling, head):
                yield chunk
        finally:
            self._forget(request_id)

    def stats(self) -> EngineStats:
        return self._runner.stats

    def forget_peer(self, address: str) -> None:
        self._peers.forget_address(address)

    def active_sequences(self) -> int:
        return len(self._loop)

    async def _follow(
        self, request_id: str, sampling: SamplingParams, head: DecodeChunk
    ) -> AsyncGenerator[DecodeChunk, None]:
        queue = None if head.finish_reason else self._loop.add(request_id, sampling)
        yield head
        while queue is not None:
            chunk = await _next_chunk(queue)
            yield chunk
            if chunk.finish_reason is not None:
                queue = None

    def _forget(self, request_id: str) -> None:
        self._loop.remove(request_id)
        self._runner.call_soon(self._runner.engine.release, request_id)


async def _next_chunk(queue: asyncio.Queue[StepItem]) -> DecodeChunk:
    """Every token already waiting, as one chunk (a slow reader gets fewer, larger ones)."""
    items = [await queue.get()]
    while not queue.empty():
        items.append(queue.get_nowait())
    tokens: list[int] = []
    for item in items:
        if isinstance(item, WorkerError):
            raise item
        tokens.append(item.token)
        if item.finish_reason is not None:
            return DecodeChunk(tuple(tokens), item.finish_reason)
    return DecodeChunk(tuple(tokens))
