"""Both transports, two ends in one process: bytes, bounds, incarnations, failures."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest

from tandem.engines.base import KvRange
from tandem.kv import (
    KvPeerError,
    KvRangeError,
    KvTransferError,
    KvTransport,
    PeerInfo,
    make_transport,
    nixl_available,
)
from tandem.kv import tcp_wire as wire
from tandem.kv.envelope import AgentHeader, encode_metadata

BACKENDS = [
    "tcp",
    pytest.param(
        "nixl", marks=pytest.mark.skipif(not nixl_available(), reason="nixl not installed")
    ),
]
TIMEOUT_S = 10.0


def random_regions(seed: int, sizes: list[int]) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size, dtype=np.uint8) for size in sizes]


def peer_of(transport: KvTransport) -> PeerInfo:
    return PeerInfo(transport.worker_id, transport.incarnation, transport.local_metadata())


def random_ranges(
    seed: int, remote_sizes: list[int], local_sizes: list[int], count: int
) -> tuple[list[KvRange], list[KvRange]]:
    """Random remote ranges paired with non-overlapping local ranges (so each is checkable)."""
    rng = np.random.default_rng(seed)
    remote: list[KvRange] = []
    local: list[KvRange] = []
    cursor = [0] * len(local_sizes)
    for _ in range(count):
        length = int(rng.integers(1, 4096))
        region = int(rng.integers(0, len(local_sizes)))
        if cursor[region] + length > local_sizes[region]:
            continue
        gap = 0 if rng.random() < 0.5 else int(rng.integers(0, 64))
        start = min(cursor[region] + gap, local_sizes[region] - length)
        local.append(KvRange(region, start, length))
        cursor[region] = start + length
        r_region = int(rng.integers(0, len(remote_sizes)))
        remote.append(
            KvRange(r_region, int(rng.integers(0, remote_sizes[r_region] - length + 1)), length)
        )
    return remote, local


class Ends:
    """Opens transports for a test and closes them afterwards, even when it fails."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.opened: list[KvTransport] = []

    async def open(
        self, worker_id: str, incarnation: str, regions: list[np.ndarray]
    ) -> KvTransport:
        transport = make_transport(self.backend, worker_id=worker_id, incarnation=incarnation)
        self.opened.append(transport)
        await transport.register([memoryview(r) for r in regions])
        # Any end may be read from at any time here, as if a claim were always held (a
        # NIXL target over UCX tcp only progresses while it expects reads).
        transport.expect_reads(1)
        return transport

    async def close(self) -> None:
        for transport in self.opened:
            await transport.close()


@pytest.fixture(params=BACKENDS)
async def ends(request: pytest.FixtureRequest) -> AsyncIterator[Ends]:
    ends = Ends(request.param)
    yield ends
    await ends.close()


async def test_random_ranges_arrive_byte_for_byte(ends: Ends) -> None:
    remote_mem = random_regions(1, [1 << 20, 300_000])
    local_mem = [np.zeros(1 << 19, np.uint8), np.zeros(200_000, np.uint8)]
    prefill = await ends.open("prefill-0", "a", remote_mem)
    decode = await ends.open("decode-0", "b", local_mem)
    remote, local = random_ranges(7, [1 << 20, 300_000], [1 << 19, 200_000], count=300)

    stats = await decode.read(peer_of(prefill), remote, local, TIMEOUT_S)

    assert stats.nbytes == sum(r.length for r in remote)
    assert 0 < stats.descriptors <= len(remote)
    for r, loc in zip(remote, local, strict=True):
        expected = remote_mem[r.region][r.offset : r.offset + r.length]
        got = local_mem[loc.region][loc.offset : loc.offset + loc.length]
        assert np.array_equal(got, expected)


async def test_adjacent_ranges_become_one_descriptor(ends: Ends) -> None:
    remote_mem = random_regions(2, [64 * 1024])
    local_mem = [np.zeros(64 * 1024, np.uint8)]
    prefill = await ends.open("p", "a", remote_mem)
    decode = await ends.open("d", "b", local_mem)
    ranges = [KvRange(0, i * 1024, 1024) for i in range(64)]

    stats = await decode.read(peer_of(prefill), ranges, ranges, TIMEOUT_S)

    assert stats.descriptors == 1
    assert np.array_equal(local_mem[0], remote_mem[0])


async def test_new_incarnation_is_rehandshaked_never_stale(ends: Ends) -> None:
    local_mem = [np.zeros(4096, np.uint8)]
    decode = await ends.open("d", "b", local_mem)
    ranges = [KvRange(0, 0, 4096)]
    first_mem = random_regions(3, [4096])
    first = await ends.open("p", "one", first_mem)
    await decode.read(peer_of(first), ranges, ranges, TIMEOUT_S)
    assert np.array_equal(local_mem[0], first_mem[0])
    await first.close()

    # Same worker id, new process start: new incarnation, new memory.
    second_mem = random_regions(4, [4096])
    second = await ends.open("p", "two", second_mem)
    await decode.read(peer_of(second), ranges, ranges, TIMEOUT_S)
    assert np.array_equal(local_mem[0], second_mem[0])


async def test_metadata_for_another_incarnation_is_refused(ends: Ends) -> None:
    prefill = await ends.open("p", "one", random_regions(5, [4096]))
    decode = await ends.open("d", "b", [np.zeros(4096, np.uint8)])
    forged = PeerInfo("p", "two", prefill.local_metadata())
    with pytest.raises(KvPeerError, match="expected p@two"):
        await decode.connect(forged, TIMEOUT_S)


@pytest.mark.parametrize(
    ("remote", "local", "fragment"),
    [
        (KvRange(0, 4000, 200), KvRange(0, 0, 200), "peer p@one range #0"),
        (KvRange(1, 0, 10), KvRange(0, 0, 10), "names region 1"),
        (KvRange(0, 0, 200), KvRange(0, 4000, 200), "local range #0"),
    ],
)
async def test_out_of_range_reads_are_rejected_before_any_byte_moves(
    ends: Ends, remote: KvRange, local: KvRange, fragment: str
) -> None:
    prefill = await ends.open("p", "one", random_regions(6, [4096]))
    local_mem = [np.zeros(4096, np.uint8)]
    decode = await ends.open("d", "b", local_mem)
    with pytest.raises(KvRangeError, match=fragment):
        await decode.read(peer_of(prefill), [remote], [local], TIMEOUT_S)
    assert not local_mem[0].any()


async def test_read_from_a_closed_peer_fails_cleanly_then_recovers() -> None:
    # TCP only: a closed in-process NIXL agent's memory stays mapped, so NIXL only
    # notices a *dead* peer (covered across processes in tests/integration/).
    ends = Ends("tcp")
    try:
        await _closed_peer_then_recover(ends)
    finally:
        await ends.close()


async def _closed_peer_then_recover(ends: Ends) -> None:
    local_mem = [np.zeros(4096, np.uint8)]
    decode = await ends.open("d", "b", local_mem)
    ranges = [KvRange(0, 0, 4096)]
    gone = await ends.open("p", "one", random_regions(8, [4096]))
    gone_peer = peer_of(gone)
    await decode.read(gone_peer, ranges, ranges, TIMEOUT_S)
    await gone.close()
    with pytest.raises(KvTransferError, match="p@one") as info:
        await decode.read(gone_peer, ranges, ranges, TIMEOUT_S)
    assert info.value.peer == "p@one"

    back_mem = random_regions(9, [4096])
    back = await ends.open("p", "two", back_mem)
    await decode.read(peer_of(back), ranges, ranges, TIMEOUT_S)
    assert np.array_equal(local_mem[0], back_mem[0])


async def test_tcp_read_from_a_silent_peer_times_out() -> None:
    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # never answers

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    header = AgentHeader("tcp", "p", "one", ((0, 4096),), host="127.0.0.1", port=port)
    peer = PeerInfo("p", "one", encode_metadata(header))
    decode = make_transport("tcp", worker_id="d", incarnation="b")
    await decode.register([memoryview(np.zeros(4096, np.uint8))])
    try:
        with pytest.raises(KvTransferError, match="timed out"):
            await decode.read(peer, [KvRange(0, 0, 4096)], [KvRange(0, 0, 4096)], 0.3)
    finally:
        await decode.close()
        server.close()
        await server.wait_closed()


async def _raw_request(port: int, incarnation: str, ranges: list[KvRange]) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(wire.encode_request(incarnation, ranges))
        await writer.drain()
        async with asyncio.timeout(TIMEOUT_S):
            status = wire.decode_status(await reader.readexactly(wire.STATUS_BYTES))
            if status == wire.STATUS_OK:
                total = wire.decode_total(await reader.readexactly(wire.TOTAL_BYTES))
                await reader.readexactly(total)
                return "ok"
            size = wire.decode_error_len(await reader.readexactly(wire.ERROR_LEN_BYTES))
            return (await reader.readexactly(size)).decode()
    finally:
        writer.close()


async def test_tcp_server_refuses_out_of_range_and_wrong_incarnation() -> None:
    """The serving side checks every range itself: a hostile client cannot read past them."""
    prefill = make_transport("tcp", worker_id="p", incarnation="one")
    await prefill.register([memoryview(random_regions(10, [4096])[0])])
    port = int(prefill.port)  # type: ignore[attr-defined]
    try:
        assert await _raw_request(port, "one", [KvRange(0, 0, 4096)]) == "ok"
        refused = await _raw_request(port, "one", [KvRange(0, 4095, 2)])
        assert "outside region 0" in refused
        refused = await _raw_request(port, "one", [KvRange(0, 0, 1), KvRange(7, 0, 1)])
        assert "names region 7" in refused
        refused = await _raw_request(port, "zero", [KvRange(0, 0, 1)])
        assert "incarnation" in refused
    finally:
        await prefill.close()


async def test_cancelled_read_leaves_the_transport_usable(ends: Ends) -> None:
    remote_mem = random_regions(11, [8 << 20])
    local_mem = [np.zeros(8 << 20, np.uint8)]
    prefill = await ends.open("p", "one", remote_mem)
    decode = await ends.open("d", "b", local_mem)
    ranges = [KvRange(0, i * 4096, 4096) for i in range(0, 2048, 2)]
    task = asyncio.create_task(decode.read(peer_of(prefill), ranges, ranges, TIMEOUT_S))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    local_mem[0][:] = 0
    await decode.read(peer_of(prefill), ranges, ranges, TIMEOUT_S)
    for r in ranges:
        assert np.array_equal(
            local_mem[0][r.offset : r.offset + r.length],
            remote_mem[0][r.offset : r.offset + r.length],
        )
