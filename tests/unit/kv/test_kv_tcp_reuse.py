"""The TCP KV transport reuses its connections: many reads, one connection, observed
from the kernel's socket table rather than from the transport's own bookkeeping."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tandem.engines.base import KvRange
from tandem.kv import KvTransport, PeerInfo, make_transport
from tandem.kv.envelope import decode_metadata
from tandem.security import CredentialStore

TIMEOUT_S = 10.0


def client_ports_towards(port: int) -> set[int]:
    """The client-side port of every IPv4 TCP connection to ``port`` the kernel still
    knows (any state, TIME_WAIT included, seen from either end): one per connection
    opened to it recently."""
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local = int(fields[1].split(":")[1], 16)
        remote = int(fields[2].split(":")[1], 16)
        if remote == port:
            ports.add(local)
        elif local == port and remote != 0:  # the server's end of an accepted connection
            ports.add(remote)
    return ports


def peer_of(transport: KvTransport) -> PeerInfo:
    return PeerInfo(transport.worker_id, transport.incarnation, transport.local_metadata())


async def open_pair(
    credentials: CredentialStore | None = None, **serve: float
) -> tuple[KvTransport, KvTransport, np.ndarray, np.ndarray]:
    remote = np.random.default_rng(1).integers(0, 256, 1 << 16, dtype=np.uint8)
    local = np.zeros(1 << 16, dtype=np.uint8)
    tls = {"credentials": credentials}
    prefill = make_transport(
        "tcp", worker_id="p", incarnation="a", host="127.0.0.1", **tls, **serve
    )
    decode = make_transport("tcp", worker_id="d", incarnation="b", host="127.0.0.1", **tls)
    await prefill.register([memoryview(remote)])
    await decode.register([memoryview(local)])
    return prefill, decode, remote, local


async def test_consecutive_reads_share_one_connection() -> None:
    prefill, decode, remote, local = await open_pair()
    try:
        header, _ = decode_metadata(prefill.local_metadata())
        for i in range(6):
            ranges = [KvRange(0, i * 4096, 4096)]
            await decode.read(peer_of(prefill), ranges, ranges, TIMEOUT_S)
        assert np.array_equal(local[: 6 * 4096], remote[: 6 * 4096])
        assert len(client_ports_towards(header.port)) == 1
    finally:
        await decode.close()
        await prefill.close()


@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "mutual-tls"])
async def test_a_connection_the_server_closed_while_idle_is_replaced_transparently(
    tls: bool, credentials_dir: Callable[[str, str], Path]
) -> None:
    store = CredentialStore(credentials_dir("demo", "creds")) if tls else None
    prefill, decode, remote, local = await open_pair(store, idle_close_s=0.05)
    try:
        header, _ = decode_metadata(prefill.local_metadata())
        ranges = [KvRange(0, 0, 4096)]
        await decode.read(peer_of(prefill), ranges, ranges, TIMEOUT_S)
        first = client_ports_towards(header.port)
        # Wait until the server has closed the idle connection (it leaves TIME_WAIT or
        # a closed socket behind on our side).
        deadline = time.monotonic() + 5
        while not _closed_by_server(header.port):
            assert time.monotonic() < deadline, "server never closed the idle connection"
            await asyncio.sleep(0.01)
        ranges = [KvRange(0, 4096, 4096)]
        await decode.read(peer_of(prefill), ranges, ranges, TIMEOUT_S)
        assert np.array_equal(local[4096:8192], remote[4096:8192])
        assert len(client_ports_towards(header.port) - first) == 1  # one new connection
    finally:
        await decode.close()
        await prefill.close()


def _closed_by_server(port: int) -> bool:
    """Our end of the connection to ``port`` got the server's FIN (CLOSE_WAIT, 08)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[2].split(":")[1], 16) == port and fields[3] == "08":
            return True
    return False
