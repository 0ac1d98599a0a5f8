"""KV transports across two processes on 127.0.0.1: bytes, restarts, peer death.

Run as a script, this file is the serving (prefill-side) helper: it registers
deterministic random regions, prints ``READY <metadata hex>`` and serves until its stdin
closes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator

import numpy as np
import pytest

from tandem.engines.base import KvRange
from tandem.kv import KvTransferError, KvTransport, PeerInfo, make_transport, nixl_available

pytestmark = [pytest.mark.integration, pytest.mark.parallel]

# Keep UCX (NIXL) on the loopback interface, here and in the helper processes.
os.environ.setdefault("UCX_NET_DEVICES", "lo")

BACKENDS = [
    "tcp",
    pytest.param(
        "nixl", marks=pytest.mark.skipif(not nixl_available(), reason="nixl not installed")
    ),
]
SMALL = 1 << 20
BIG = 128 << 20
TIMEOUT_S = 20.0


def region_bytes(seed: int, size: int) -> np.ndarray:
    return np.frombuffer(np.random.default_rng(seed).bytes(size), dtype=np.uint8)


async def _serve_main(backend: str, worker_id: str, incarnation: str, seed: int, size: int) -> None:
    region = region_bytes(seed, size).copy()
    transport = make_transport(backend, worker_id=worker_id, incarnation=incarnation)
    await transport.register([memoryview(region)])
    transport.expect_reads(1)  # serves reads for its whole life, as if claimed
    print("READY", transport.local_metadata().hex(), flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes our stdin
    await transport.close()


class Helper:
    def __init__(self, proc: asyncio.subprocess.Process, peer: PeerInfo, seed: int, size: int):
        self.proc, self.peer, self.seed, self.size = proc, peer, seed, size

    def expected(self) -> np.ndarray:
        return region_bytes(self.seed, self.size)


class Helpers:
    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.procs: list[asyncio.subprocess.Process] = []

    async def start(self, worker_id: str, incarnation: str, seed: int, size: int) -> Helper:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            self.backend,
            worker_id,
            incarnation,
            str(seed),
            str(size),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        async with asyncio.timeout(60):
            while True:
                line = (await proc.stdout.readline()).decode()
                assert line, f"helper exited with {await proc.wait()} before READY"
                if line.startswith("READY "):
                    break
        metadata = bytes.fromhex(line.split()[1])
        return Helper(proc, PeerInfo(worker_id, incarnation, metadata), seed, size)

    async def stop_all(self) -> None:
        for proc in self.procs:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()


@pytest.fixture(params=BACKENDS)
async def helpers(request: pytest.FixtureRequest) -> AsyncIterator[Helpers]:
    helpers = Helpers(request.param)
    yield helpers
    await helpers.stop_all()


@pytest.fixture
async def decode_side(helpers: Helpers) -> AsyncIterator[tuple[KvTransport, np.ndarray]]:
    local = np.zeros(BIG, np.uint8)
    transport = make_transport(helpers.backend, worker_id="decode-0", incarnation="d1")
    await transport.register([memoryview(local)])
    yield transport, local
    await transport.close()


def _spread_ranges(seed: int, count: int, size: int) -> list[KvRange]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, size // count, count)
    starts = np.cumsum(np.concatenate([[0], lengths[:-1]]))
    return [KvRange(0, int(s), int(n)) for s, n in zip(starts, lengths, strict=True)]


async def test_ranges_arrive_from_another_process(
    helpers: Helpers, decode_side: tuple[KvTransport, np.ndarray]
) -> None:
    decode, local = decode_side
    helper = await helpers.start("prefill-0", "p1", seed=1, size=SMALL)
    ranges = _spread_ranges(2, 100, SMALL)
    stats = await decode.read(helper.peer, ranges, ranges, TIMEOUT_S)
    end = ranges[-1].offset + ranges[-1].length
    assert stats.nbytes == end
    assert np.array_equal(local[:end], helper.expected()[:end])


async def test_restarted_peer_is_rehandshaked(
    helpers: Helpers, decode_side: tuple[KvTransport, np.ndarray]
) -> None:
    decode, local = decode_side
    ranges = [KvRange(0, 0, SMALL)]
    first = await helpers.start("prefill-0", "p1", seed=3, size=SMALL)
    await decode.read(first.peer, ranges, ranges, TIMEOUT_S)
    assert np.array_equal(local[:SMALL], first.expected())
    first.proc.kill()
    await first.proc.wait()

    second = await helpers.start("prefill-0", "p2", seed=4, size=SMALL)
    await decode.read(second.peer, ranges, ranges, TIMEOUT_S)
    assert np.array_equal(local[:SMALL], second.expected())


async def test_dead_peer_fails_cleanly_before_the_timeout(
    helpers: Helpers, decode_side: tuple[KvTransport, np.ndarray]
) -> None:
    decode, _ = decode_side
    ranges = [KvRange(0, 0, SMALL)]
    helper = await helpers.start("prefill-0", "p1", seed=5, size=SMALL)
    await decode.read(helper.peer, ranges, ranges, TIMEOUT_S)
    helper.proc.kill()
    await helper.proc.wait()
    with pytest.raises(KvTransferError) as info:
        await decode.read(helper.peer, ranges, ranges, TIMEOUT_S)
    assert "prefill-0@p1" in str(info.value)
    assert "timed out" not in str(info.value)  # death is detected, not waited out


async def test_peer_killed_mid_transfer_fails_cleanly(
    helpers: Helpers, decode_side: tuple[KvTransport, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    decode, local = decode_side
    helper = await helpers.start("prefill-0", "p1", seed=6, size=BIG)
    # 4 KiB ranges in a far-from-contiguous pattern keep the copy busy long enough to stop
    # the peer in the middle of it.
    ranges = [KvRange(0, off, 4096) for off in range(0, BIG, 8192)]
    await decode.read(helper.peer, ranges[:1], ranges[:1], TIMEOUT_S)  # connection is up
    local[:] = 0
    read = asyncio.create_task(decode.read(helper.peer, ranges, ranges, TIMEOUT_S))
    async with asyncio.timeout(TIMEOUT_S):
        while True:  # until the first bytes have landed
            if local[4096 * 2 : 4096 * 4].any() or read.done():
                break
            await asyncio.sleep(0.001)
    helper.proc.send_signal(signal.SIGSTOP)  # freeze it mid-copy, then kill it
    helper.proc.kill()
    await helper.proc.wait()
    with pytest.raises(KvTransferError, match="prefill-0@p1"):
        await read
    assert not local[BIG - 4096 * 2 : BIG - 4096].any(), "the read finished before the kill"


if __name__ == "__main__":
    backend, worker_id, incarnation, seed, size = sys.argv[1:6]
    if os.environ.get("TANDEM_TEST_HELPER_LOG"):
        import logging

        logging.basicConfig(level=logging.INFO)
    asyncio.run(_serve_main(backend, worker_id, incarnation, int(seed), int(size)))
