"""Workers with the cluster's credentials: mutual TLS on gRPC and KV, hostile callers
refused at the handshake, and a rotation in three steps under a running stream."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest

from tandem.proto import worker_pb2 as pb
from tandem.proto import worker_pb2_grpc
from tandem.security import CredentialBundle, CredentialStore, issue, write_bundle
from tandem.security.credentials import read_bundle
from tandem.security.pki import join_pem
from tandem.worker.client import WorkerClient
from tandem.worker.errors import WorkerCallError
from tandem.worker.types import HealthStatus, Role

from .conftest import WorkerFactory
from .test_worker_service import GREEDY, collect, prompt_of

Dirs = Callable[[str, str], Path]


async def test_only_members_of_the_cluster_get_past_the_handshake(
    worker: WorkerFactory, credentials_dir: Dirs
) -> None:
    ours = CredentialStore(credentials_dir("demo", "ours"))
    theirs = CredentialStore(credentials_dir("demo", "theirs"))  # same name, another CA
    async with worker(Role.BOTH, "both-0", credentials=ours) as both:
        assert (await both.client.health()).status is HealthStatus.SERVING
        async with WorkerClient(both.address, timeout_s=3.0, credentials=theirs) as stranger:
            with pytest.raises(WorkerCallError) as refused:
                await stranger.claim_kv("r1", "both-0-1", "evil@1", 5.0)
            assert refused.value.grpc_status == "UNAVAILABLE"
            with pytest.raises(WorkerCallError):
                await stranger.drain(0.0)
        async with grpc.aio.insecure_channel(both.address) as plaintext:
            stub = worker_pb2_grpc.WorkerStub(plaintext)  # type: ignore[no-untyped-call]
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.KvAgent(pb.KvAgentRequest(), timeout=3.0)
            assert info.value.code() is grpc.StatusCode.UNAVAILABLE
        # Nothing above reached the service: still serving, not drained.
        assert (await both.client.health()).status is HealthStatus.SERVING
        assert await collect(both.client, "after", prompt_of(20))


async def test_a_disaggregated_decode_pulls_kv_over_mutual_tls(
    worker: WorkerFactory, credentials_dir: Dirs
) -> None:
    store = CredentialStore(credentials_dir("demo", "creds"))
    async with (
        worker(Role.PREFILL, "prefill-0", credentials=store) as prefill,
        worker(Role.DECODE, "decode-0", credentials=store) as decode,
        worker(Role.BOTH, "both-0", credentials=store) as both,
    ):
        prompt = prompt_of(100, seed=4)
        reply = await prefill.client.prefill("r", prompt, GREEDY)
        assert reply.kv is not None
        chunks = [
            c
            async for c in decode.client.decode(
                "r", prompt, GREEDY, remote_kv=reply.kv, first_token=reply.first_token
            )
        ]
        assert chunks[0].kv_bytes_transferred == reply.kv.nbytes
        assert [t for c in chunks for t in c.token_ids] == await collect(both.client, "l", prompt)


def _stage(directory: Path, trust: bytes, member: CredentialBundle) -> None:
    write_bundle(directory, CredentialBundle(trust, member.cert, member.key))


async def test_a_rotation_in_three_steps_never_cuts_a_stream(
    worker: WorkerFactory, credentials_dir: Dirs
) -> None:
    """What the operator's rotation does to a mounted Secret (trust the new CA; present
    the new certificate; drop the old CA), applied to a worker's files while a stream
    runs: the stream finishes, new calls follow each step, old-only holders end up out."""
    directory = credentials_dir("demo", "rotating")
    old, _ = read_bundle(directory)
    new = CredentialBundle.of(issue("demo", datetime.now(UTC)))
    store = CredentialStore(directory, refresh_s=0.0)
    # A member one step behind: it trusts both CAs but still presents the old certificate.
    behind = credentials_dir("unused", "behind")
    _stage(behind, join_pem(old.trust, new.trust), old)
    lagging = CredentialStore(behind, refresh_s=0.0)
    async with worker(Role.BOTH, "both-0", credentials=store) as both:
        prompt = prompt_of(30, seed=8)
        expected = await collect(both.client, "warm", prompt, GREEDY)
        stream = both.client.decode("long", prompt, GREEDY)
        tokens = list((await anext(stream)).token_ids)

        _stage(directory, join_pem(old.trust, new.trust), old)  # 1: trust both CAs
        assert (await both.client.health()).status is HealthStatus.SERVING
        _stage(directory, join_pem(old.trust, new.trust), new)  # 2: present the new one
        assert (await both.client.health()).status is HealthStatus.SERVING
        async with WorkerClient(both.address, timeout_s=3.0, credentials=lagging) as holdout:
            assert (await holdout.health()).status is HealthStatus.SERVING  # one step: fine
            _stage(directory, new.trust, new)  # 3: the old CA is gone
            # Two steps apart (the propagation wait was too short for it): refused.
            async with WorkerClient(both.address, timeout_s=3.0, credentials=lagging) as late:
                with pytest.raises(WorkerCallError) as refused:
                    await late.health()
            assert refused.value.grpc_status == "UNAVAILABLE"
            # ... but its channel opened in step 2 keeps working until it closes.
            assert (await holdout.health()).status is HealthStatus.SERVING

        async for chunk in stream:  # the stream opened before step 1 still runs
            tokens.extend(chunk.token_ids)
        assert tokens == expected
        assert await collect(both.client, "after", prompt, GREEDY) == expected
