"""KV fencing: a decode worker can never read prefill blocks that were freed and reused,
whatever the two hosts' clocks say and however late its one-sided read lands.

Two real workers (gRPC, TCP KV transport, reference engine) on 127.0.0.1. The decode
worker's transport is gated: its READ starts only when the test says so, standing in for
an RDMA read still in flight. Meanwhile the prefill worker's lease clock runs past the
lease, and another prompt asks for the same blocks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from tandem.engines.base import KvRange, SamplingParams
from tandem.kv import KvTransport, PeerInfo, TransferStats
from tandem.worker.errors import WorkerCallError
from tandem.worker.types import Role

from .conftest import WorkerFactory

PROMPT_A = [(i * 37 + 11) % 200 + 20 for i in range(64)]
PROMPT_B = [(i * 53 + 101) % 200 + 20 for i in range(64)]
SAMPLING = SamplingParams(max_tokens=8, seed=5)
# The prefill pool holds one 64-token prompt (2 layers x 4 blocks of 16) but not two.
PREFILL_ENGINE: dict[str, object] = {"num_kv_blocks": 12}


class SettableClock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class GatedTransport(KvTransport):
    """Delegates to ``inner``; each ``read`` waits for ``proceed`` before moving bytes."""

    def __init__(self, inner: KvTransport) -> None:
        super().__init__(inner.worker_id, inner.incarnation)
        self.inner = inner
        self.backend = inner.backend  # type: ignore[misc]
        self.started = asyncio.Event()
        self.proceed = asyncio.Event()

    async def register(self, regions: Sequence[memoryview]) -> None:
        await self.inner.register(regions)

    def local_metadata(self) -> bytes:
        return self.inner.local_metadata()

    async def connect(self, peer: PeerInfo, timeout_s: float) -> None:
        await self.inner.connect(peer, timeout_s)

    async def read(
        self,
        peer: PeerInfo,
        remote_ranges: Sequence[KvRange],
        local_ranges: Sequence[KvRange],
        timeout_s: float,
    ) -> TransferStats:
        self.started.set()
        await self.proceed.wait()
        return await self.inner.read(peer, remote_ranges, local_ranges, timeout_s)

    def forget(self, worker_id: str) -> None:
        self.inner.forget(worker_id)

    async def close(self) -> None:
        await self.inner.close()


async def try_prefill_until(prefill: Callable[[], object], within: float) -> tuple[bool, list[str]]:
    """Retry a prefill refused as busy until it succeeds or ``within`` seconds pass."""
    refusals: list[str] = []
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            await prefill()  # type: ignore[misc]
            return True, refusals
        except WorkerCallError as exc:
            assert exc.grpc_status == "RESOURCE_EXHAUSTED", exc.message
            refusals.append(exc.message)
        await asyncio.sleep(0.05)
    return False, refusals


async def test_a_late_read_never_sees_reused_blocks_even_with_a_skewed_decode_clock(
    worker: WorkerFactory,
) -> None:
    prefill_clock = SettableClock(time.time())
    gates: list[GatedTransport] = []

    def gate(inner: KvTransport) -> KvTransport:
        gates.append(GatedTransport(inner))
        return gates[-1]

    async with (
        worker(
            Role.PREFILL, "p1", engine=PREFILL_ENGINE, clock=prefill_clock, lease_s=0.5
        ) as prefill,
        worker(
            Role.DECODE,
            "d1",
            # The decode host's clock runs 30 s behind the prefill host's.
            clock=lambda: time.time() - 30.0,
            wrap_transport=gate,
            kv_transfer_timeout_s=10.0,
        ) as decode,
    ):
        local = [
            t async for c in decode.client.decode("ref", PROMPT_A, SAMPLING) for t in c.token_ids
        ]
        reply = await prefill.client.prefill("a", PROMPT_A, SAMPLING)
        assert reply.kv is not None

        async def pull() -> list[int]:
            stream = decode.client.decode(
                "a", PROMPT_A, SAMPLING, remote_kv=reply.kv, first_token=reply.first_token
            )
            return [t async for c in stream for t in c.token_ids]

        pulling = asyncio.create_task(pull())
        async with asyncio.timeout(10):
            await gates[0].started.wait()
        # The read is "in flight". The prefill host's lease clock runs 3 s on: far past
        # the 0.5 s lease, within the decode side's 10 s transfer timeout.
        prefill_clock.now += 3.0
        reused, refusals = await try_prefill_until(
            lambda: prefill.client.prefill("b", PROMPT_B, SAMPLING), within=2.0
        )
        gates[0].proceed.set()
        pulled = await asyncio.wait_for(pulling, 20)

    assert pulled == local, "the decode worker continued from KV it did not prefill"
    assert not reused and refusals, "blocks under a read were handed to another prompt"
