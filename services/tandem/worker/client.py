"""Typed asyncio client of a worker's gRPC API (``worker.proto``).

Every call has a deadline (``timeout_s`` per call, else the client's default) that
travels to the worker. Failures raise ``WorkerCallError`` whose ``grpc_status`` names
the status (``RESOURCE_EXHAUSTED``: busy, try another worker; ``ABORTED``: the KV
handoff failed, prefill locally; ``UNAVAILABLE``: worker gone or draining;
``INVALID_ARGUMENT``: do not retry). Leaving a ``decode`` iteration early cancels the
stream, and the worker frees the sequence's KV.

With a ``CredentialStore`` the channel is mutual TLS (``tandem.security``). When the
credentials rotate, the next call opens a channel with the new ones; the old channel
takes no new calls and is closed once its calls have finished (at most
``decode_timeout_s`` later), so a rotation never cuts a stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, TypeVar

import grpc

from tandem.engines.base import SamplingParams
from tandem.proto import worker_pb2 as pb
from tandem.proto import worker_pb2_grpc
from tandem.security.credentials import CredentialStore
from tandem.security.grpc_tls import open_channel
from tandem.telemetry.propagation import inject_metadata
from tandem.worker import convert
from tandem.worker.errors import ERROR_CODE_METADATA, WorkerCallError
from tandem.worker.types import (
    AgentInfo,
    DecodeChunk,
    HealthInfo,
    KvClaim,
    KvEventBatch,
    PrefillReply,
    RemoteKvHandle,
    WorkerStats,
)

MAX_MESSAGE_BYTES = 64 << 20
MESSAGE_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]
# A worker that vanishes without closing its connections (its node lost, a partition, a
# FIN dropped behind a full queue) would hold each open call until its deadline: minutes
# for a CPU prefill. While a call is open the client pings every KEEPALIVE_TIME_MS and
# drops a connection that does not answer within KEEPALIVE_TIMEOUT_MS; its calls fail
# UNAVAILABLE and the router moves on. gRPC core channel arguments
# (grpc/impl/channel_arg_names.h), behaviour checked with grpcio 1.85.3
# (tests/unit/worker/test_worker_keepalive.py).
KEEPALIVE_TIME_MS = 10_000
KEEPALIVE_TIMEOUT_MS = 5_000


def channel_options(keepalive_time_ms: int, keepalive_timeout_ms: int) -> list[tuple[str, int]]:
    return [
        *MESSAGE_OPTIONS,
        ("grpc.keepalive_time_ms", keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive_timeout_ms),
        # grpcio 1.85 waits for a ping's ack this long (default 1 minute), whatever the above.
        ("grpc.http2.ping_timeout_ms", keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", 0),
        # A long prefill streams no data; by default a client stops pinging after 2 such pings.
        ("grpc.http2.max_pings_without_data", 0),
    ]


# Servers accept those pings: by default they allow one per 5 minutes without data, count
# each faster one as a strike and close the connection after two ("too_many_pings"). With
# no strike limit they accept pings at any rate, the tests' faster ones included.
SERVER_OPTIONS = [
    *MESSAGE_OPTIONS,
    ("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_TIME_MS // 2),
    ("grpc.http2.max_ping_strikes", 0),
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
        credentials: CredentialStore | None = None,
        keepalive_time_ms: int = KEEPALIVE_TIME_MS,
        keepalive_timeout_ms: int = KEEPALIVE_TIMEOUT_MS,
    ) -> None:
        """``address`` is ``host:port``; ``timeout_s`` bounds unary calls and
        ``decode_timeout_s`` a whole decode stream; ``on_unavailable`` is told when a
        call finds the worker gone (a cache may then drop this client);
        ``credentials``: mutual TLS (None: plaintext, for loopback members only);
        ``keepalive_time_ms`` / ``keepalive_timeout_ms``: how often an open call pings
        and how long the worker has to answer (shorter in tests, to notice sooner)."""
        self.address = address
        self._channel_options = channel_options(keepalive_time_ms, keepalive_timeout_ms)
        self._on_unavailable = on_unavailable
        self.timeout_s = timeout_s
        self.decode_timeout_s = decode_timeout_s
        self._credentials = credentials
        self._fingerprint = ""
        self._retiring: dict[grpc.aio.Channel, asyncio.Task[None]] = {}
        self._channel = self._open()

    def _open(self) -> grpc.aio.Channel:
        material = self._credentials.current() if self._credentials else None
        self._fingerprint = material.fingerprint if material else ""
        channel = open_channel(self.address, material, self._channel_options)
        self._stub: Any = worker_pb2_grpc.WorkerStub(channel)  # type: ignore[no-untyped-call]
        return channel

    @property
    def stub(self) -> Any:
        """The stub for the next call: on a new channel once the credentials rotated."""
        rotated = self._credentials is not None and (
            self._credentials.current().fingerprint != self._fingerprint
        )
        if rotated:
            old, self._channel = self._channel, self._open()
            task = asyncio.get_running_loop().create_task(old.close(grace=self.decode_timeout_s))
            self._retiring[old] = task
            task.add_done_callback(lambda _: self._retiring.pop(old, None))
        return self._stub

    async def __aenter__(self) -> WorkerClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self, grace_s: float | None = None) -> None:
        """Close the channel; calls still on it get ``grace_s`` to finish (None: cut now,
        they fail ``UNAVAILABLE``)."""
        await self._channel.close(grace_s)
        for old in list(self._retiring):
            await old.close()  # what the rotation left running is cut now
        await asyncio.gather(*self._retiring.values(), return_exceptions=True)

    async def _unary(
        self, method: Callable[..., Awaitable[ResponseT]], request: object, timeout_s: float | None
    ) -> ResponseT:
        # The caller's trace context rides along, so the worker's spans join its trace.
        with self._call_errors():
            return await method(
                request, timeout=timeout_s or self.timeout_s, metadata=inject_metadata()
            )

    @contextlib.contextmanager
    def _call_errors(self) -> Iterator[None]:
        """Every way a call can end badly, as a ``WorkerCallError``. Closing a channel
        (this client evicted after another call found the worker gone) ends the calls
        still on it with ``asyncio.CancelledError`` although nobody cancelled their
        callers, and refuses new ones with ``UsageError`` (grpcio 1.85.3): both mean the
        worker is out of reach, not that the caller gave up, which must stay a
        cancellation."""
        try:
            yield
        except grpc.aio.AioRpcError as exc:
            raise self._error(exc) from None
        except grpc.aio.UsageError:
            raise self._closed() from None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise
            raise self._closed() from None

    def _error(self, exc: grpc.aio.AioRpcError) -> WorkerCallError:
        status = exc.code().name
        if status == "UNAVAILABLE" and self._on_unavailable is not None:
            self._on_unavailable()
        codes = [v for k, v in exc.trailing_metadata() or () if k == ERROR_CODE_METADATA]
        remote_code = str(codes[0]) if codes else None
        return WorkerCallError(self.address, status, exc.details() or "", remote_code=remote_code)

    def _closed(self) -> WorkerCallError:
        return WorkerCallError(self.address, "UNAVAILABLE", "the client's channel was closed")

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
        response: pb.PrefillResponse = await self._unary(self.stub.Prefill, request, timeout_s)
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
        call = self.stub.Decode(
            request, timeout=timeout_s or self.decode_timeout_s, metadata=inject_metadata()
        )
        try:
            with self._call_errors():
                async for chunk in call:
                    yield convert.chunk_from_pb(chunk)
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
        response: pb.ClaimKvResponse = await self._unary(self.stub.ClaimKv, request, timeout_s)
        return convert.claim_from_pb(response)

    async def release(
        self, request_id: str, *, claimer: str = "", timeout_s: float | None = None
    ) -> bool:
        """The KV of ``request_id`` is no longer needed: by ``claimer`` after its read,
        or (empty claimer) by a router giving the request up."""
        request = pb.ReleaseRequest(request_id=request_id, claimer=claimer)
        response: pb.ReleaseResponse = await self._unary(self.stub.Release, request, timeout_s)
        return response.released

    async def health(self, *, timeout_s: float | None = None) -> HealthInfo:
        response: pb.HealthResponse = await self._unary(
            self.stub.Health, pb.HealthRequest(), timeout_s
        )
        try:
            return convert.health_from_pb(response)
        except ValueError as exc:  # e.g. a role a newer worker knows and we do not
            message = f"malformed Health reply: {exc}"
            raise WorkerCallError(self.address, "INTERNAL", message) from exc

    async def stats(self, *, timeout_s: float | None = None) -> WorkerStats:
        response: pb.StatsResponse = await self._unary(
            self.stub.Stats, pb.StatsRequest(), timeout_s
        )
        return convert.stats_from_pb(response)

    async def kv_events(self) -> AsyncIterator[KvEventBatch]:
        """The worker's KV event stream: a snapshot, then every change. It lasts as long
        as the caller reads (no deadline); leaving the iteration cancels it. A malformed
        batch ends it with a ``WorkerCallError``."""
        call = self.stub.KvEvents(pb.KvEventsRequest())
        try:
            with self._call_errors():
                async for message in call:
                    try:
                        batch = convert.kv_batch_from_pb(message)
                    except ValueError as exc:
                        raise WorkerCallError(
                            self.address, "INTERNAL", f"malformed KV event: {exc}"
                        ) from exc
                    yield batch
        finally:
            call.cancel()

    async def kv_agent(self, *, timeout_s: float | None = None) -> AgentInfo:
        response: pb.KvAgentResponse = await self._unary(
            self.stub.KvAgent, pb.KvAgentRequest(), timeout_s
        )
        return convert.agent_from_pb(response)

    async def drain(self, grace_s: float, *, timeout_s: float | None = None) -> int:
        """Ask the worker to drain; returns how many requests were still in flight
        when it stopped waiting (0: drained). The deadline defaults to grace + timeout."""
        request = pb.DrainRequest(grace_seconds=grace_s)
        response: pb.DrainResponse = await self._unary(
            self.stub.Drain, request, timeout_s or grace_s + self.timeout_s
        )
        return response.in_flight
