"""Hostile peers against a TCP KV agent with the cluster's credentials, over real sockets.

Each probe is sent by a raw client (its own TLS or none at all), then a legitimate decode
side of the same cluster reads and checks the bytes: the agent refuses clearly and keeps
serving."""

from __future__ import annotations

import asyncio
import ssl
import struct
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tandem.engines.base import KvRange
from tandem.kv import KvPeerError, KvTransferError, PeerInfo
from tandem.kv import tcp_wire as wire
from tandem.kv.tcp_transport import TcpTransport
from tandem.security import CredentialStore

TIMEOUT_S = 10.0
REGION = 1 << 16


@dataclass
class Agent:
    transport: TcpTransport
    memory: np.ndarray
    store: CredentialStore

    @property
    def peer(self) -> PeerInfo:
        t = self.transport
        return PeerInfo(t.worker_id, t.incarnation, t.local_metadata())


async def open_agent(worker_id: str, incarnation: str, creds: Path, seed: int) -> Agent:
    store = CredentialStore(creds)
    memory = np.random.default_rng(seed).integers(0, 256, REGION, dtype=np.uint8)
    transport = TcpTransport(worker_id, incarnation, credentials=store)
    await transport.register([memory_view(memory)])
    return Agent(transport, memory, store)


def memory_view(array: np.ndarray) -> memoryview:
    return memoryview(array)


@pytest.fixture
async def pair(credentials_dir: Callable[[str, str], Path]) -> AsyncIterator[tuple[Agent, Agent]]:
    creds = credentials_dir("demo", "demo")
    prefill = await open_agent("prefill-0", "inc-1", creds, seed=1)
    decode = await open_agent("decode-0", "inc-2", creds, seed=2)
    decode.memory[:] = 0
    try:
        yield prefill, decode
    finally:
        await decode.transport.close()
        await prefill.transport.close()


async def assert_still_serving(prefill: Agent, decode: Agent, offset: int) -> None:
    """A member of the cluster reads 4 KiB and gets exactly the prefill side's bytes."""
    ranges = [KvRange(0, offset, 4096)]
    decode.transport.forget(prefill.transport.worker_id)  # a fresh connection each time
    await decode.transport.read(prefill.peer, ranges, ranges, TIMEOUT_S)
    got = decode.memory[offset : offset + 4096]
    assert np.array_equal(got, prefill.memory[offset : offset + 4096])


async def raw_exchange(
    port: int, payload: bytes, context: ssl.SSLContext | None, name: str
) -> bytes:
    """Send ``payload`` (after a TLS handshake when ``context``) and read the reply
    until the agent closes the connection."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname=name if context else None
    )
    try:
        writer.write(payload)
        await writer.drain()
        async with asyncio.timeout(TIMEOUT_S):
            return await reader.read()
    finally:
        writer.close()


def error_of(reply: bytes) -> str:
    assert wire.decode_status(reply[: wire.STATUS_BYTES]) == wire.STATUS_ERROR, reply[:16]
    start = wire.STATUS_BYTES + wire.ERROR_LEN_BYTES
    size = wire.decode_error_len(reply[wire.STATUS_BYTES : start])
    return reply[start : start + size].decode()


async def test_members_read_over_mutual_tls(pair: tuple[Agent, Agent]) -> None:
    prefill, decode = pair
    ranges = [KvRange(0, 0, REGION)]
    stats = await decode.transport.read(prefill.peer, ranges, ranges, TIMEOUT_S)
    assert stats.nbytes == REGION
    assert np.array_equal(decode.memory, prefill.memory)


async def test_another_clusters_member_cannot_read(
    pair: tuple[Agent, Agent], credentials_dir: Callable[[str, str], Path]
) -> None:
    prefill, decode = pair
    stranger = await open_agent("decode-9", "x", credentials_dir("demo", "other"), seed=3)
    before = stranger.memory.copy()
    try:
        ranges = [KvRange(0, 0, 4096)]
        with pytest.raises(KvTransferError, match="TLS with the peer failed") as info:
            await stranger.transport.read(prefill.peer, ranges, ranges, TIMEOUT_S)
        assert "this cluster's credentials" in info.value.message
        assert np.array_equal(stranger.memory, before)  # not one byte arrived
    finally:
        await stranger.transport.close()
    await assert_still_serving(prefill, decode, 4096)


async def test_a_plaintext_request_gets_nothing(pair: tuple[Agent, Agent]) -> None:
    prefill, decode = pair
    request = wire.encode_request(prefill.transport.incarnation, [KvRange(0, 0, 4096)])
    try:
        reply = await raw_exchange(prefill.transport.port, request, None, "")
    except ConnectionResetError:  # closed with our request unread
        reply = b""
    assert prefill.memory[:4096].tobytes() not in reply
    assert not reply.startswith(wire.RESPONSE_MAGIC)
    await assert_still_serving(prefill, decode, 0)


async def test_a_client_without_a_certificate_is_refused(pair: tuple[Agent, Agent]) -> None:
    prefill, decode = pair
    anonymous = ssl.create_default_context(cadata=prefill.store.current().bundle.trust.decode())
    request = wire.encode_request(prefill.transport.incarnation, [KvRange(0, 0, 4096)])
    name = prefill.store.current().server_name
    try:  # TLS 1.3: the refusal arrives as an alert, or as the connection closing
        reply = await raw_exchange(prefill.transport.port, request, anonymous, name)
    except (ssl.SSLError, ConnectionError) as exc:
        reply = repr(exc).encode()
    assert not reply.startswith(wire.RESPONSE_MAGIC) and prefill.memory[:64].tobytes() not in reply
    await assert_still_serving(prefill, decode, 8192)


def _ranges_request(incarnation: str, ranges: list[tuple[int, int, int]]) -> bytes:
    return wire.encode_request(incarnation, [KvRange(*r) for r in ranges])


_INC = "inc-1"
PROBES = [
    pytest.param(
        _ranges_request("inc-0", [(0, 0, 4096)]),
        "request was for incarnation 'inc-0'",
        id="stale-incarnation",
    ),
    pytest.param(
        _ranges_request(_INC, [(0, REGION - 10, 20)]), "is outside region 0", id="out-of-range"
    ),
    pytest.param(_ranges_request(_INC, [(3, 0, 1)]), "names region 3", id="unknown-region"),
    pytest.param(
        _ranges_request(_INC, [(0, 0, REGION), (0, 0, REGION)]),
        f"more than the {REGION} bytes registered",
        id="oversize-block-list",
    ),
    pytest.param(
        wire.REQUEST_MAGIC
        + struct.pack("<H", 5)
        + _INC[:5].encode()
        + struct.pack("<I", wire.MAX_RANGES + 1),
        f"the limit is {wire.MAX_RANGES}",
        id="too-many-ranges",
    ),
    pytest.param(
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "malformed request: not a TKVQ request", id="garbage"
    ),
    pytest.param(
        wire.REQUEST_MAGIC + struct.pack("<H", 2) + b"\xff\xfe" + struct.pack("<I", 0),
        "malformed request",
        id="invalid-utf8",
    ),
]


@pytest.mark.parametrize(("payload", "refusal"), PROBES)
async def test_a_member_sending_a_bad_request_gets_a_clear_refusal(
    pair: tuple[Agent, Agent], payload: bytes, refusal: str
) -> None:
    prefill, decode = pair
    material = decode.store.current()
    reply = await raw_exchange(
        prefill.transport.port, payload, material.client_ssl, material.server_name
    )
    assert refusal in error_of(reply)
    assert prefill.memory[:64].tobytes() not in reply
    await assert_still_serving(prefill, decode, 12288)


async def test_a_handshake_for_a_stale_incarnation_is_refused(pair: tuple[Agent, Agent]) -> None:
    prefill, decode = pair
    old = PeerInfo(prefill.transport.worker_id, "inc-0", prefill.peer.metadata)
    with pytest.raises(
        KvPeerError, match="metadata is for prefill-0@inc-1, expected prefill-0@inc-0"
    ):
        await decode.transport.connect(old, TIMEOUT_S)
    await assert_still_serving(prefill, decode, 16384)
