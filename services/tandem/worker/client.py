"""Typed asyncio client of a worker's gRPC API (``worker.proto``).

Every call has a deadline (``timeout_s`` per call, else the client's default) that
travels to the worker. Failures raise ``WorkerCallError`` whose ``grpc_status`` names
the status (``RESOURCE_EXHAUSTED``: busy, try another worker; ``ABORTED``: the KV
handoff failed, prefill locally; ``UNAVAILABLE``: worker gone or draining;
``INVALID_ARGUMENT``: do not retry). Leaving a ``decode`` iteration early cancels the
stream, and the worker frees the sequence's KV.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

import grpc

from tandem.engines.base import SamplingParams
from tandem.proto import worker_pb2 as pb
from tandem.proto import worker_pb2_grpc
from tandem.worker import convert
from tandem.worker.errors import WorkerCallError
from tandem.worker.types import (
    AgentInfo,
    DecodeChunk,
    HealthInfo,
    KvClaim,
    PrefillReply,
    RemoteKvHandle,
    WorkerStats,
)

MAX_MESSAGE_BYTES = 64 << 20
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]

ResponseT = TypeVar("ResponseT")


class WorkerClient:
    def __init__(
        self,
        address: str,
        *,
        timeout_s: float = 30.0,
        decode_timeout_s: float = 600.0,
        on_unavailable: Callable[[], None] | None = None,
    ) -> None:
        """``address`` is ``host:port``; ``timeout_s`` bounds unary calls and
        ``decode_timeout_s`` a whole decode stream; ``on_unavailable`` is told when a
        call finds the worker gone (a cache may then drop this client)."""
        self.address = address
        self._on_unavailable = on_unavailable
        self.timeout_s = timeout_s
        self.decode_timeout_s = decode_timeout_s
        self._channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        self._stub: Any = worker_pb2_grpc.WorkerStub(self._channel)  # type: ignore[no-untyped-call]

    async def __aenter__(self) -> WorkerClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    async def _unary(
        self, method: Callable[..., Awaitable[ResponseT]], request: object, timeout_s: float | None
    ) -> ResponseT:
        try:
            return await method(request, timeout=timeout_s or self.timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc) from None

    def _error(self, exc: grpc.aio.AioRpcError) -> WorkerCallError:
        status = exc.code().name
        if status == "UNAVAILABLE" and self._on_unavailable is not None:
            self._on_unavailable()
        return WorkerCallError(self.address, status, exc.details() or "")

    async def prefill(
        self,
        request_id: str,
        prompt: Sequence[int],
        sampling: SamplingParams,
        *,
        timeout_s: float | None = None,
    ) -> PrefillReply:
        request = pb.PrefillRequest(
            request_id=request_id,
            prompt_token_ids=prompt,
            sampling=convert.sampling_to_pb(sampling),
        )
        response: pb.PrefillResponse = await self._unary(self._stub.Prefill, request, timeout_s)
        return convert.prefill_reply_from_pb(response)

    async def decode(
        self,
        request_id: str,
        prompt: Sequence[int],
        sampling: SamplingParams,
        *,
        remote_kv: RemoteKvHandle | None = None,
        first_token: int | None = None,
        timeout_s: float | None = None,
    ) -> AsyncIterator[DecodeChunk]:
        """Stream the completion. Without ``remote_kv`` the worker prefills locally;
        with it (and the prefill's ``first_token``) it pulls the KV. Either way the
        first chunk starts with the first generated token."""
        request = pb.DecodeRequest(
            request_id=request_id,
            prompt_token_ids=prompt,
            sampling=convert.sampling_to_pb(sampling),
        )
        if remote_kv is not None:
            if first_token is None:
                raise ValueError("decode with remote_kv needs the prefill's first_token")
            request.remote_kv.CopyFrom(convert.remote_kv_to_pb(remote_kv))
            request.first_token_id = first_token
        call = self._stub.Decode(request, timeout=timeout_s or self.decode_timeout_s)
        try:
            async for chunk in call:
                yield convert.chunk_from_pb(chunk)
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc) from None
        finally:
            call.cancel()  # no-op once finished; tells the worker we left early

    async def claim_kv(
        self,
        request_id: str,
        incarnation: str,
        claimer: str,
        read_s: float,
        *,
        timeout_s: float | None = None,
    ) -> KvClaim:
        """Ask the prefill worker to pin ``request_id``'s KV for a read of ``read_s``."""
        request = pb.ClaimKvRequest(
            request_id=request_id, incarnation=incarnation, claimer=claimer, read_seconds=read_s
        )
        response: pb.ClaimKvResponse = await self._unary(self._stub.ClaimKv, request, timeout_s)
        return convert.claim_from_pb(response)

    async def release(
        self, request_id: str, *, claimer: str = "", timeout_s: float | None = None
    ) -> bool:
        """The KV of ``request_id`` is no longer needed: by ``claimer`` after its read,
        or (empty claimer) by a router giving the request up."""
        request = pb.ReleaseRequest(request_id=request_id, claimer=claimer)
        response: pb.ReleaseResponse = await self._unary(self._stub.Release, request, timeout_s)
        return response.released

    async def health(self, *, timeout_s: float | None = None) -> HealthInfo:
        response: pb.HealthResponse = await self._unary(
            self._stub.Health, pb.HealthRequest(), timeout_s
        )
        try:
            return convert.health_from_pb(response)
        except ValueError as exc:  # e.g. a role a newer worker knows and we do not
            message = f"malformed Health reply: {exc}"
            raise WorkerCallError(self.address, "INTERNAL", message) from exc

    async def stats(self, *, timeout_s: float | None = None) -> WorkerStats:
        response: pb.StatsResponse = await self._unary(
            self._stub.Stats, pb.StatsRequest(), timeout_s
        )
        return convert.stats_from_pb(response)

    async def kv_agent(self, *, timeout_s: float | None = None) -> AgentInfo:
        response: pb.KvAgentResponse = await self._unary(
            self._stub.KvAgent, pb.KvAgentRequest(), timeout_s
        )
        return convert.agent_from_pb(response)

    async def drain(self, grace_s: float, *, timeout_s: float | None = None) -> int:
        """Ask the worker to drain; returns how many requests were still in flight
        when it stopped waiting (0: drained). The deadline defaults to grace + timeout."""
        request = pb.DrainRequest(grace_seconds=grace_s)
        response: pb.DrainResponse = await self._unary(
            self._stub.Drain, request, timeout_s or grace_s + self.timeout_s
        )
        return response.in_flight
