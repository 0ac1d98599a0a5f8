"""A gRPC worker process with no model: ``python -m tandem_dev.doubles.null_worker``.

It serves the real ``tandem.worker.v1.Worker`` API over an :class:`InProcessWorker`, so
frontends, routers and the local runtime can be exercised with real processes and real
gRPC where the reference engine would be too slow (load, fault and fuzz tests, the
frontend benchmark). A decode that receives remote KV "pulls" it by calling ``Release``
on the prefill worker named in the handoff, as a real decode worker does after its
transfer; KV that is not parked there fails the decode with ABORTED, like a failed
handoff. Accepts (and ignores) ``tandem.worker``'s other flags, so launchers can swap it in;
``--credentials`` it honours like a worker (mutual TLS on its port and to its peers).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from tandem.api.v1alpha1 import TokenizerKind
from tandem.proto import worker_pb2 as pb
from tandem.proto import worker_pb2_grpc
from tandem.router.policy import WorkerRole
from tandem.security import CredentialStore, check_plaintext_bind
from tandem.tokenization.selection import fingerprint, load_tokenizer
from tandem.worker import convert
from tandem.worker.client import WorkerClient
from tandem.worker.errors import WorkerCallError
from tandem.worker.grpc_server import create_server
from tandem.worker.tokenizer import tokenizer_choice
from tandem_dev.doubles.inprocess import InProcessWorker

RELEASE_TIMEOUT_S = 5.0
Context = Any  # grpc.aio.ServicerContext (grpc ships no types)


class NullWorkerServicer(worker_pb2_grpc.WorkerServicer):
    def __init__(self, worker: InProcessWorker, credentials: CredentialStore | None) -> None:
        self._worker = worker
        self._credentials = credentials
        self._peers: dict[str, WorkerClient] = {}  # prefill workers we "pull" from

    async def Prefill(self, request: pb.PrefillRequest, context: Context) -> pb.PrefillResponse:
        try:
            reply = await self._worker.prefill(
                request.request_id,
                list(request.prompt_token_ids),
                convert.sampling_from_pb(request.sampling),
            )
        except WorkerCallError as error:
            await context.abort(grpc.StatusCode[error.grpc_status], error.message)
        return convert.prefill_reply_to_pb(reply)

    async def Decode(self, request: pb.DecodeRequest, context: Context) -> AsyncIterator[Any]:
        remote = None
        if request.HasField("remote_kv"):
            remote = convert.remote_kv_from_pb(request.remote_kv)
            if not await self._pull(remote.grpc_address, request.request_id):
                await context.abort(
                    grpc.StatusCode.ABORTED, f"KV of {request.request_id} not on {remote}"
                )
            self._worker.ledger.parked[request.request_id] = remote.grpc_address
        stream = self._worker.decode(
            request.request_id,
            list(request.prompt_token_ids),
            convert.sampling_from_pb(request.sampling),
            remote_kv=remote,
            first_token=request.first_token_id,
        )
        try:
            async for chunk in stream:
                yield convert.chunk_to_pb(chunk)
        except WorkerCallError as error:
            await context.abort(grpc.StatusCode[error.grpc_status], error.message)

    async def _pull(self, peer: str, request_id: str) -> bool:
        client = self._peers.get(peer)
        if client is None:
            client = self._peers[peer] = WorkerClient(
                peer, timeout_s=RELEASE_TIMEOUT_S, credentials=self._credentials
            )
        try:
            return await client.release(request_id)
        except WorkerCallError:
            return False

    async def Release(self, request: pb.ReleaseRequest, context: Context) -> pb.ReleaseResponse:
        parked = self._worker.ledger.parked
        released = parked.pop(request.request_id, None) is not None
        return pb.ReleaseResponse(released=released)

    async def Health(self, request: pb.HealthRequest, context: Context) -> pb.HealthResponse:
        return convert.health_to_pb(await self._worker.health())

    async def Stats(self, request: pb.StatsRequest, context: Context) -> pb.StatsResponse:
        return convert.stats_to_pb(await self._worker.stats())

    async def KvEvents(self, request: pb.KvEventsRequest, context: Context) -> AsyncIterator[Any]:
        # No model, no prefix cache: an empty snapshot, then nothing until it stops.
        async for batch in self._worker.kv_events():
            yield convert.kv_batch_to_pb(batch)

    async def Drain(self, request: pb.DrainRequest, context: Context) -> pb.DrainResponse:
        self._worker.draining = True
        return pb.DrainResponse(in_flight=self._worker.active)


async def serve(
    host: str,
    port: int,
    role: WorkerRole,
    token_delay: float,
    tokenizer_fingerprint: str,
    credentials: CredentialStore | None = None,
) -> None:
    server, bound = create_server(host, port, credentials)
    worker = InProcessWorker(
        f"{host}:{bound}",
        role,
        token_delay=token_delay,
        tokenizer_fingerprint=tokenizer_fingerprint,
    )
    servicer = NullWorkerServicer(worker, credentials)
    worker_pb2_grpc.add_WorkerServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"READY {bound}", flush=True)
    await stop.wait()
    await server.stop(grace=5)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tandem_dev.doubles.null_worker")
    parser.add_argument("--role", required=True, choices=[r.value for r in WorkerRole])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument(
        "--token-delay",
        type=float,
        default=float(os.environ.get("TANDEM_NULL_WORKER_TOKEN_DELAY", "0")),
        help="seconds per generated token (env TANDEM_NULL_WORKER_TOKEN_DELAY)",
    )
    # tandem.worker's tokenizer flags: a null worker reports the same fingerprint.
    parser.add_argument("--tokenizer", choices=[k.value for k in TokenizerKind])
    parser.add_argument("--tokenizer-source")
    parser.add_argument("--engine", default="reference")
    parser.add_argument("--credentials", type=Path)
    args, _ = parser.parse_known_args(argv)  # tandem.worker's other flags are ignored
    choice = tokenizer_choice(args.tokenizer, args.tokenizer_source, None, args.engine)
    tokenizer = fingerprint(load_tokenizer(choice))
    if args.credentials is not None:
        credentials: CredentialStore | None = CredentialStore(args.credentials)
    else:
        check_plaintext_bind(args.host, "the null worker's gRPC port")
        credentials = None
    role = WorkerRole(args.role)
    asyncio.run(serve(args.host, args.port, role, args.token_delay, tokenizer, credentials))
    return 0


if __name__ == "__main__":
    sys.exit(main())
