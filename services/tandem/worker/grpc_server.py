"""The gRPC face of a worker: proto <-> domain translation and error -> status mapping.

All behaviour lives in ``WorkerService``; a ``WorkerError`` becomes the gRPC status it
names, with its message as the details. With credentials the port is mutual TLS: a peer
without the cluster's certificate fails the handshake and never reaches a method, and
the KV data path (``WORKER_ONLY``: claiming held KV, and the KV agent metadata that lets
a peer read this worker's KV memory) answers only peers holding a worker certificate;
any other member of the cluster (the frontend) gets PERMISSION_DENIED
(``security.identity``, docs/security.md "Roles").
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any, NoReturn, TypeAlias

import grpc
from opentelemetry import trace

from tandem.proto import worker_pb2 as pb
from tandem.proto import worker_pb2_grpc
from tandem.security.credentials import CredentialStore
from tandem.security.grpc_tls import server_credentials
from tandem.security.identity import grpc_peer
from tandem.worker import convert
from tandem.worker.client import SERVER_OPTIONS
from tandem.worker.errors import ERROR_CODE_METADATA, WorkerError
from tandem.worker.rpc_trace import DecodeTrace, prefill_span
from tandem.worker.service import WorkerService

logger = logging.getLogger(__name__)

# grpc ships no type information (mypy sees it as Any); name the role for readers.
Context: TypeAlias = Any  # grpc.aio.ServicerContext

# The methods only workers may call: the rest are what the frontend's router calls
# (Prefill, Decode, Release, Health, Stats, KvEvents) or the local runtime (Drain).
WORKER_ONLY = frozenset({"ClaimKv", "KvAgent"})


async def _abort(context: Context, exc: WorkerError) -> NoReturn:
    trailing = ((ERROR_CODE_METADATA, exc.code),) if exc.code else ()
    await context.abort(grpc.StatusCode[exc.grpc_status], exc.message, trailing)
    raise AssertionError("context.abort returned")  # it always raises


class WorkerServicer(worker_pb2_grpc.WorkerServicer):
    def __init__(self, service: WorkerService) -> None:
        self._service = service

    async def _require_worker(self, method: str, context: Context) -> None:
        """Abort with PERMISSION_DENIED unless the caller holds a worker certificate
        (plaintext ports, loopback only, have no identities to check)."""
        peer = grpc_peer(context.auth_context())
        if peer is None or peer.is_worker:
            return
        logger.warning(
            "refused %s from %s (%s): only workers may call it", method, peer.name, context.peer()
        )
        self._service.metrics.refused_peers.labels(method).inc()
        await context.abort(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{peer.name} is not a worker; {method} is for workers",
        )

    async def Prefill(self, request: pb.PrefillRequest, context: Context) -> pb.PrefillResponse:
        prompt = tuple(request.prompt_token_ids)
        span = prefill_span(
            self._service.config.worker_id,
            request.request_id,
            len(prompt),
            context.invocation_metadata(),
        )
        with trace.use_span(span, end_on_exit=True):
            try:
                reply = await self._service.prefill(
                    request.request_id, prompt, convert.sampling_from_pb(request.sampling)
                )
            except WorkerError as exc:
                await _abort(context, exc)
        return convert.prefill_reply_to_pb(reply)

    async def Decode(
        self, request: pb.DecodeRequest, context: Context
    ) -> AsyncIterator[pb.DecodeChunk]:
        remote = (
            convert.remote_kv_from_pb(request.remote_kv) if request.HasField("remote_kv") else None
        )
        first = request.first_token_id if request.HasField("first_token_id") else None
        prompt = tuple(request.prompt_token_ids)
        spans = DecodeTrace(
            self._service.config.worker_id,
            request.request_id,
            len(prompt),
            remote is not None,
            context.invocation_metadata(),
        )
        stream = self._service.decode(
            request.request_id, prompt, convert.sampling_from_pb(request.sampling), remote, first
        )
        error: BaseException | None = None
        try:
            async for chunk in stream:
                spans.chunk(chunk)
                yield convert.chunk_to_pb(chunk)
        except WorkerError as exc:
            error = exc
            logger.info("decode of %s failed: %s", request.request_id, exc.message)
            await _abort(context, exc)
        except BaseException as exc:  # cancelled (the router left), or a bug
            error = exc
            raise
        finally:
            spans.finish(error)
            await stream.aclose()

    async def ClaimKv(self, request: pb.ClaimKvRequest, context: Context) -> pb.ClaimKvResponse:
        await self._require_worker("ClaimKv", context)
        claim = self._service.claim_kv(
            request.request_id, request.incarnation, request.claimer, request.read_seconds
        )
        return convert.claim_to_pb(claim)

    async def Release(self, request: pb.ReleaseRequest, context: Context) -> pb.ReleaseResponse:
        released = await self._service.release(request.request_id, request.claimer or None)
        return pb.ReleaseResponse(released=released)

    async def Health(self, request: pb.HealthRequest, context: Context) -> pb.HealthResponse:
        return convert.health_to_pb(self._service.health())

    async def Stats(self, request: pb.StatsRequest, context: Context) -> pb.StatsResponse:
        return convert.stats_to_pb(self._service.stats())

    async def KvAgent(self, request: pb.KvAgentRequest, context: Context) -> pb.KvAgentResponse:
        await self._require_worker("KvAgent", context)
        return convert.agent_to_pb(self._service.kv_agent())

    async def KvEvents(
        self, request: pb.KvEventsRequest, context: Context
    ) -> AsyncIterator[pb.KvEventBatch]:
        stream = self._service.kv_events()
        try:
            async for batch in stream:
                yield convert.kv_batch_to_pb(batch)
        except WorkerError as exc:
            await _abort(context, exc)
        finally:
            await stream.aclose()

    async def Drain(self, request: pb.DrainRequest, context: Context) -> pb.DrainResponse:
        return pb.DrainResponse(in_flight=await self._service.drain(request.grace_seconds))


def create_server(
    host: str, port: int, credentials: CredentialStore | None = None
) -> tuple[grpc.aio.Server, int]:
    """An unstarted server bound to ``host:port`` (0: any free port) and the bound port;
    mutual TLS with ``credentials``, else plaintext."""
    server = grpc.aio.server(options=SERVER_OPTIONS)
    address = f"{host}:{port}"
    if credentials is None:
        bound = server.add_insecure_port(address)
    else:
        bound = server.add_secure_port(address, server_credentials(credentials))
    if bound == 0:
        raise OSError(f"cannot bind the worker's gRPC port on {host}:{port}")
    return server, bound


def add_service(server: grpc.aio.Server, service: WorkerService) -> None:
    worker_pb2_grpc.add_WorkerServicer_to_server(WorkerServicer(service), server)  # type: ignore[no-untyped-call]
