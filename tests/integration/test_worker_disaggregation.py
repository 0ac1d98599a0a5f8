"""Real worker processes on 127.0.0.1: prefill here, KV over NIXL or TCP, decode there.

The output of every disaggregated request must be token-identical to the same request
served by one worker doing both, and the bytes moved must be the analytical KV size.
Every worker holds the same cluster credentials, as in a pod: gRPC, the KV handshake
and the TCP KV transport are mutual TLS.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tandem.devcluster.ports import allocate_ports
from tandem.engines.base import SamplingParams
from tandem.engines.reference import compute_kv_bytes
from tandem.engines.reference.config import ReferenceModelConfig
from tandem.kv import nixl_available
from tandem.worker.client import WorkerClient
from tandem.worker.errors import WorkerCallError
from tandem.worker.types import HealthStatus, PrefillReply

pytestmark = [pytest.mark.integration, pytest.mark.parallel]

ENGINE: dict[str, object] = {
    "num_layers": 2,
    "hidden": 32,
    "num_heads": 2,
    "num_kv_heads": 1,
    "head_dim": 16,
    "intermediate": 64,
    "num_kv_blocks": 4096,
}
CONFIG = ReferenceModelConfig.from_options(ENGINE)
SAMPLING = SamplingParams(max_tokens=6)
BACKENDS = [
    "tcp",
    pytest.param(
        "nixl", marks=pytest.mark.skipif(not nixl_available(), reason="nixl not installed")
    ),
]
CONCURRENCY = 4


def prompt_lengths() -> list[int]:
    """52 lengths in 1..4096: every block (16), window (128) and prefill-chunk (512)
    boundary we can afford, plus random ones."""
    edges = [1, 2, 15, 16, 17, 127, 128, 129, 255, 256, 257, 511, 512, 513]
    edges += [1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096]
    rng = np.random.default_rng(20261129)
    return edges + sorted(int(n) for n in rng.integers(1, 4097, 52 - len(edges)))


def prompt_of(length: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(0, 256, length).tolist()


PROMPTS = [(f"req-{i}-{n}", prompt_of(n, seed=i)) for i, n in enumerate(prompt_lengths())]


class Cluster:
    """Starts reference-engine workers with the test's engine, KV backend and
    credentials."""

    def __init__(self, tmp: Path, launcher: Any, credentials: Path) -> None:
        self.tmp = tmp
        self.launcher = launcher
        self.credentials = credentials

    async def start(
        self, role: str, worker_id: str, backend: str, port: int = 0, *extra: str
    ) -> Any:
        log = self.tmp / f"{worker_id}-{len(self.launcher.started)}.log"
        env = {**os.environ, "UCX_NET_DEVICES": "lo"}  # loopback only
        args = [
            f"--role={role}",
            f"--worker-id={worker_id}",
            f"--port={port}",
            f"--engine-options={json.dumps(ENGINE)}",
            f"--kv-backend={backend}",
            "--kv-transfer-timeout-s=10",
            "--rpc-timeout-s=10",
            *extra,
        ]
        return await self.launcher.start(
            worker_id, args, log=log, env=env, credentials=self.credentials
        )


@pytest.fixture
def cluster(tmp_path: Path, worker_launcher: Any, cluster_credentials: Path) -> Cluster:
    return Cluster(tmp_path, worker_launcher, cluster_credentials)


async def decode_tokens(
    client: WorkerClient, request_id: str, prompt: list[int], reply: PrefillReply | None = None
) -> tuple[list[int], int]:
    """All tokens of one decode stream, and the KV bytes it reports moving."""
    tokens: list[int] = []
    moved = 0
    stream = client.decode(
        request_id,
        prompt,
        SAMPLING,
        remote_kv=reply.kv if reply is not None else None,
        first_token=reply.first_token if reply is not None else None,
    )
    async for chunk in stream:
        moved = moved or chunk.kv_bytes_transferred
        tokens.extend(chunk.token_ids)
    return tokens, moved


async def disaggregated(
    prefill: Any, decode: Any, request_id: str, prompt: list[int]
) -> tuple[list[int], int, PrefillReply]:
    reply = await prefill.client.prefill(request_id, prompt, SAMPLING)
    if reply.kv is None:  # the first token already ended it
        return [reply.first_token], 0, reply
    tokens, moved = await decode_tokens(decode.client, request_id, prompt, reply)
    return tokens, moved, reply


async def gather_bounded(*jobs: object) -> list[object]:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def bounded(job: object) -> object:
        async with gate:
            return await job  # type: ignore[misc]

    return await asyncio.gather(*(bounded(job) for job in jobs))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_disaggregated_output_is_token_identical(cluster: Cluster, backend: str) -> None:
    both, prefill, decode = await asyncio.gather(
        cluster.start("both", "both-0", backend),
        cluster.start("prefill", "prefill-0", backend),
        cluster.start("decode", "decode-0", backend),
    )
    local = await gather_bounded(*(decode_tokens(both.client, rid, p) for rid, p in PROMPTS))
    remote = await gather_bounded(*(disaggregated(prefill, decode, rid, p) for rid, p in PROMPTS))

    pulled = 0
    for (rid, prompt), (local_tokens, _), (tokens, moved, reply) in zip(
        PROMPTS, local, remote, strict=True
    ):
        assert tokens == local_tokens, f"{rid} ({len(prompt)} tokens) diverged"
        if reply.kv is not None:
            pulled += 1
            expected = compute_kv_bytes(CONFIG, len(prompt))
            assert reply.kv.nbytes == expected, rid
            assert moved == expected, rid
    assert pulled >= 50
    stats = await prefill.client.stats()
    assert stats.held_for_transfer == 0  # every pulled sequence was released
    assert stats.kv_blocks_free == stats.kv_blocks_total


@pytest.mark.parametrize("backend", BACKENDS)
async def test_restarted_prefill_worker_is_rehandshaked(cluster: Cluster, backend: str) -> None:
    decode, prefill = await asyncio.gather(
        cluster.start("decode", "decode-0", backend),
        cluster.start("prefill", "prefill-0", backend),
    )
    both = await cluster.start("both", "both-0", backend)
    prompts = [(f"r{i}", prompt_of(100 + 37 * i, seed=i)) for i in range(4)]
    expected = [(await decode_tokens(both.client, rid, p))[0] for rid, p in prompts]

    tokens, _, _ = await disaggregated(prefill, decode, *prompts[0])
    assert tokens == expected[0]
    stale = await prefill.client.prefill("stale", prompts[1][1], SAMPLING)
    first_incarnation = (await prefill.client.health()).incarnation

    # Same worker id, same address, new process.
    prefill.proc.kill()
    await prefill.proc.wait()
    prefill = await cluster.start("prefill", "prefill-0", backend, port=prefill.port)
    assert (await prefill.client.health()).incarnation != first_incarnation

    # KV prefilled by the dead process is refused cleanly, never read from stale state.
    with pytest.raises(WorkerCallError) as info:
        await decode_tokens(decode.client, "stale", prompts[1][1], stale)
    assert info.value.grpc_status == "ABORTED"
    assert "restarted" in info.value.message

    for (rid, prompt), want in zip(prompts[1:], expected[1:], strict=True):
        tokens, _, _ = await disaggregated(prefill, decode, rid, prompt)
        assert tokens == want


@pytest.mark.parametrize("backend", BACKENDS)
async def test_pull_from_a_dead_prefill_worker_fails_cleanly(
    cluster: Cluster, backend: str
) -> None:
    decode, prefill = await asyncio.gather(
        cluster.start("decode", "decode-0", backend),
        cluster.start("prefill", "prefill-0", backend),
    )
    prompt = prompt_of(300, seed=1)
    await disaggregated(prefill, decode, "warm", prompt)  # the peer is known and connected
    reply = await prefill.client.prefill("orphan", prompt, SAMPLING)
    prefill.proc.send_signal(signal.SIGKILL)
    await prefill.proc.wait()

    # The decode worker's transfer timeout is 10 s and this call's deadline 60 s: an
    # ABORTED status (not DEADLINE_EXCEEDED) shows it failed by itself, cleanly.
    with pytest.raises(WorkerCallError) as info:
        await decode_tokens(decode.client, "orphan", prompt, reply)
    assert info.value.grpc_status == "ABORTED"
    assert "prefill-0" in info.value.message

    # The decode worker is unharmed: its reserved blocks are back, it still serves.
    stats = await decode.client.stats()
    assert stats.kv_blocks_free == stats.kv_blocks_total
    fresh = await cluster.start("prefill", "prefill-0", backend)
    tokens, moved, _ = await disaggregated(fresh, decode, "after", prompt)
    assert tokens and moved == compute_kv_bytes(CONFIG, len(prompt))


async def test_sigterm_drains_then_exits(cluster: Cluster) -> None:
    worker = await cluster.start("both", "both-0", "tcp")
    await worker.client.prefill("held", prompt_of(64, seed=3), SAMPLING)  # KV awaiting a pull
    worker.proc.send_signal(signal.SIGTERM)
    async with asyncio.timeout(30):
        while True:  # until the signal has been handled
            if (await worker.client.health()).status is HealthStatus.DRAINING:
                break
            await asyncio.sleep(0.02)
    with pytest.raises(WorkerCallError) as info:
        await worker.client.prefill("new", [1, 2, 3], SAMPLING)
    assert info.value.grpc_status == "UNAVAILABLE"
    assert worker.proc.returncode is None  # still holding KV for a decode worker
    assert await worker.client.release("held") is True
    async with asyncio.timeout(30):
        assert await worker.proc.wait() == 0


async def test_http_side_port_serves_probes_metrics_and_the_admin_socket_drains(
    cluster: Cluster,
) -> None:
    (http_port,) = allocate_ports(1)
    admin = cluster.tmp / "admin.sock"
    worker = await cluster.start(
        "both", "both-0", "tcp", 0, f"--http-port={http_port}", f"--admin-socket={admin}"
    )
    prompt = prompt_of(40, seed=5)
    await decode_tokens(worker.client, "m1", prompt)
    base = f"http://127.0.0.1:{http_port}"
    async with httpx.AsyncClient(base_url=base, timeout=10.0) as http:
        async with asyncio.timeout(30):
            while True:  # uvicorn starts right after the READY line
                try:
                    health = await http.get("/healthz")
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.05)
        assert health.status_code == 200
        assert (await http.get("/readyz")).status_code == 200
        metrics = (await http.get("/metrics")).text
        stats = await worker.client.stats()
        assert f"tandem_worker_kv_blocks_total {float(stats.kv_blocks_total)}" in metrics
        assert 'tandem_worker_requests_total{outcome="ok",rpc="decode"} 1.0' in metrics
        # Nothing on the network drains a worker ...
        assert (await http.post("/drain", params={"grace_seconds": "1"})).status_code == 404
        assert (await http.get("/readyz")).status_code == 200
        assert oct(admin.stat().st_mode & 0o777) == "0o600"
        # ... the preStop hook does, from inside (the command the operator renders).
        hook = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tandem.admin", "drain", "--socket", str(admin),
            "--grace-seconds", "1", stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, _ = await hook.communicate()
        assert hook.returncode == 0 and out.decode().startswith("drained (0 request(s)")
        assert (await http.get("/readyz")).status_code == 503
