"""Per-role identities through real worker processes (docs/security.md, "Roles").

Workers run with the worker certificate of a cluster; the test's client presents the
same cluster's FRONTEND certificate, as the frontend pod does. It still gets what the
router calls (prefill, decode with a handoff, release, health), while the KV path is
refused with PERMISSION_DENIED: the KvAgent and ClaimKv RPCs and the TCP KV port. The
same calls with the worker certificate succeed.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tandem.devcluster.ports import allocate_ports
from tandem.engines.base import KvRange, SamplingParams
from tandem.kv import KvPeerError, PeerInfo
from tandem.kv.tcp_transport import TcpTransport
from tandem.security import CredentialStore, Identity, identity_dir, issue, write_identities
from tandem.worker.client import WorkerClient
from tandem.worker.errors import WorkerCallError
from tandem.worker.types import HealthStatus

pytestmark = [pytest.mark.integration, pytest.mark.parallel]

ENGINE: dict[str, object] = {
    "num_layers": 2,
    "hidden": 32,
    "num_heads": 2,
    "num_kv_heads": 1,
    "head_dim": 16,
    "intermediate": 64,
    "num_kv_blocks": 1024,
}
SAMPLING = SamplingParams(max_tokens=4)
FRONTEND_URI = "spiffe://integration.tandem.internal/frontend"


async def start(launcher: Any, tmp: Path, role: str, credentials: Path, *extra: str) -> Any:
    args = [
        f"--role={role}",
        f"--worker-id={role}-0",
        f"--engine-options={json.dumps(ENGINE)}",
        "--kv-backend=tcp",
        "--kv-transfer-timeout-s=10",
        *extra,
    ]
    env = {**os.environ, "UCX_NET_DEVICES": "lo"}
    log = tmp / f"{role}.log"
    return await launcher.start(f"{role}-0", args, log=log, env=env, credentials=credentials)


async def test_the_frontend_certificate_serves_requests_but_cannot_pull_kv(
    tmp_path: Path, worker_launcher: Any
) -> None:
    root = tmp_path / "credentials"
    write_identities(root, issue("integration", datetime.now(UTC)))
    workers = identity_dir(root, Identity.WORKER)
    frontend_store = CredentialStore(identity_dir(root, Identity.FRONTEND))
    (http_port,) = allocate_ports(1)
    prefill = await start(worker_launcher, tmp_path, "prefill", workers, f"--http-port={http_port}")
    decode = await start(worker_launcher, tmp_path, "decode", workers)
    prompt = list(range(40))
    async with (
        WorkerClient(f"127.0.0.1:{prefill.port}", credentials=frontend_store) as front_p,
        WorkerClient(f"127.0.0.1:{decode.port}", credentials=frontend_store) as front_d,
    ):
        # What the router calls: served for the frontend's certificate.
        assert (await front_p.health()).status is HealthStatus.SERVING
        reply = await front_p.prefill("r1", prompt, SAMPLING)
        assert reply.kv is not None
        tokens = [
            t
            async for chunk in front_d.decode(
                "r1", prompt, SAMPLING, remote_kv=reply.kv, first_token=reply.first_token
            )
            for t in chunk.token_ids
        ]
        assert len(tokens) == SAMPLING.max_tokens  # the decode worker pulled the KV

        # The KV path over gRPC: refused.
        with pytest.raises(WorkerCallError) as denied:
            await front_p.kv_agent()
        assert denied.value.grpc_status == "PERMISSION_DENIED"
        second = await front_p.prefill("r2", prompt, SAMPLING)
        assert second.kv is not None
        with pytest.raises(WorkerCallError) as denied:
            await front_p.claim_kv("r2", second.kv.incarnation, "front@1", 5.0)
        assert denied.value.grpc_status == "PERMISSION_DENIED"
        assert await front_p.release("r2")

        # The TCP KV port: refused for the frontend's certificate, served for a worker's.
        agent = await prefill.client.kv_agent()  # the launcher's client is a worker
        peer = PeerInfo(agent.worker_id, agent.incarnation, agent.metadata)
        memory = bytearray(4096)
        ranges = [KvRange(0, 0, 1024)]
        for identity in Identity:
            store = CredentialStore(identity_dir(root, identity))
            reader = TcpTransport("probe-0", identity.value, credentials=store)
            await reader.register([memoryview(memory)])
            try:
                if identity is Identity.FRONTEND:
                    with pytest.raises(KvPeerError, match="PERMISSION_DENIED"):
                        await reader.read(peer, ranges, ranges, 10.0)
                else:
                    stats = await reader.read(peer, ranges, ranges, 10.0)
                    assert stats.nbytes == 1024
            finally:
                await reader.close()

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}") as http:
        metrics = (await http.get("/metrics")).text
    for call in ("KvAgent", "ClaimKv", "kv_tcp"):
        assert f'tandem_worker_refused_peers_total{{call="{call}"}} 1.0' in metrics
    # What the chart's certificate alert reads: when the certificate it presents expires.
    expiry = CredentialStore(workers).current().not_after.timestamp()
    (line,) = [
        line
        for line in metrics.splitlines()
        if line.startswith("tandem_credentials_certificate_expiry_timestamp_seconds ")
    ]
    assert float(line.split()[1]) == expiry
    log = prefill.log.read_text()
    assert f"refused KvAgent from {FRONTEND_URI}" in log
    assert f"refused ClaimKv from {FRONTEND_URI}" in log
    assert f"refused {FRONTEND_URI} from" in log and "only workers may read KV" in log
