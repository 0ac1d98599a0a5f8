"""Per-role identities on a worker's ports: the frontend's certificate gets what the
router calls and PERMISSION_DENIED on the KV path; a worker's gets everything."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from tandem.kv import KvPeerError, PeerInfo
from tandem.proto import worker_pb2 as pb
from tandem.proto import worker_pb2_grpc
from tandem.security import CredentialStore, Identity, issue, write_identities
from tandem.security.grpc_tls import open_channel
from tandem.worker.client import WorkerClient
from tandem.worker.errors import WorkerCallError
from tandem.worker.metrics import WorkerMetrics
from tandem.worker.types import HealthStatus, Role

from .conftest import WorkerFactory
from .test_worker_service import GREEDY, prompt_of


def role_stores(directory: Path) -> dict[Identity, CredentialStore]:
    write_identities(directory, issue("demo", datetime.now(UTC)))
    return {i: CredentialStore(directory / i.value) for i in Identity}


def refused(metrics: WorkerMetrics, call: str) -> float:
    value = metrics.registry.get_sample_value("tandem_worker_refused_peers_total", {"call": call})
    assert value is not None
    return float(value)


async def test_the_frontend_certificate_gets_the_router_s_calls_but_not_the_kv_path(
    worker: WorkerFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stores = role_stores(tmp_path / "credentials")
    async with worker(Role.PREFILL, "prefill-0", credentials=stores[Identity.WORKER]) as prefill:
        async with WorkerClient(prefill.address, credentials=stores[Identity.FRONTEND]) as front:
            assert (await front.health()).status is HealthStatus.SERVING
            await front.stats()
            reply = await front.prefill("r", prompt_of(40), GREEDY)
            assert reply.kv is not None
            with pytest.raises(WorkerCallError) as denied:
                await front.kv_agent()
            assert denied.value.grpc_status == "PERMISSION_DENIED"
            assert "spiffe://demo.tandem.internal/frontend" in str(denied.value)
            with pytest.raises(WorkerCallError) as denied:
                await front.claim_kv("r", reply.kv.incarnation, "evil@1", 5.0)
            assert denied.value.grpc_status == "PERMISSION_DENIED"
            assert await front.release("r")
        assert refused(prefill.service.metrics, "KvAgent") == 1
        assert refused(prefill.service.metrics, "ClaimKv") == 1
        assert "refused KvAgent from spiffe://demo.tandem.internal/frontend" in caplog.text
        # A worker's certificate gets the KV path.
        async with WorkerClient(prefill.address, credentials=stores[Identity.WORKER]) as peer:
            agent = await peer.kv_agent()
            assert agent.backend == "tcp"


async def test_the_tcp_kv_port_refuses_the_frontend_certificate(
    worker: WorkerFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tandem.kv.tcp_transport import TcpTransport

    stores = role_stores(tmp_path / "credentials")
    async with worker(Role.PREFILL, "prefill-0", credentials=stores[Identity.WORKER]) as prefill:
        agent = await prefill.client.kv_agent()  # the test's client is a worker
        peer = PeerInfo(agent.worker_id, agent.incarnation, agent.metadata)
        memory = bytearray(4096)
        for identity, allowed in ((Identity.FRONTEND, False), (Identity.WORKER, True)):
            reader = TcpTransport("reader", identity.value, credentials=stores[identity])
            await reader.register([memoryview(memory)])
            try:
                if allowed:
                    await reader.connect(peer, 5.0)
                else:
                    with pytest.raises(KvPeerError, match="PERMISSION_DENIED"):
                        await reader.connect(peer, 5.0)
            finally:
                await reader.close()
        assert refused(prefill.service.metrics, "kv_tcp") == 1
        assert "only workers may read KV" in caplog.text


async def test_plaintext_workers_have_no_identities_to_check(worker: WorkerFactory) -> None:
    async with (
        worker(Role.PREFILL, "prefill-0") as prefill,
        open_channel(prefill.address, None) as channel,
    ):
        stub = worker_pb2_grpc.WorkerStub(channel)  # type: ignore[no-untyped-call]
        reply = await stub.KvAgent(pb.KvAgentRequest(), timeout=5.0)
        assert reply.backend == "tcp"
