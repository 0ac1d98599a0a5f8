"""The router-memory prefix index, kept only as the KV-routing benchmark's baseline.

Before workers published KV events, the router guessed what each worker caches from
what it had sent there: a per-worker LRU of prompt block hashes, bounded to 65,536
blocks per worker (``router/prefix_index.py``, removed in commit ee76550; restored here
from its parent). Here it feeds today's policy in place of the KV-event index, so the
benchmark compares the two sources of truth under one policy: a prompt is remembered on
a prefill worker once its prefill returns and on a decode worker once its first token
arrives, whole (every full block, chained hashes, the engine's block size) -- a stronger
baseline than the old router, which keyed prefill affinity on the first four 128-token
blocks only.

``python -m tandem_dev.bench.router_memory --config FILE ...`` is ``python -m
tandem.frontend`` with this index: what the benchmark starts instead of the frontend.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence

from tandem.engines.base import SamplingParams
from tandem.engines.reference.config import ReferenceModelConfig
from tandem.frontend.__main__ import main as frontend_main
from tandem.kv.block_hashes import compute_block_names
from tandem.kv.events import Tier
from tandem.router.kv_index import KvIndex
from tandem.router.ports import (
    DecodeChunk,
    HealthInfo,
    KvEventBatch,
    PrefillReply,
    RemoteKvHandle,
    WorkerClient,
    WorkerStats,
)

MAX_BLOCKS_PER_WORKER = 65_536  # the removed index's default


class RouterMemoryIndex(KvIndex):
    """Answers lookups (``cached_by_tier``, all on the device: the router cannot tell
    tiers apart) from what it sent where; the workers' KV events still arrive (the base
    class applies them) but are not consulted."""

    def __init__(self, block_size: int, max_blocks_per_worker: int = MAX_BLOCKS_PER_WORKER):
        super().__init__()
        self._block_size = block_size
        self._max_blocks = max_blocks_per_worker
        self._seen: dict[str, OrderedDict[int, None]] = {}

    def record(self, worker: str, prompt: Sequence[int]) -> None:
        """``worker`` now holds ``prompt``'s KV, as far as the router can tell."""
        names = compute_block_names(prompt, self._block_size)
        if not names:
            return
        seen = self._seen.setdefault(worker, OrderedDict())
        for name in names:
            seen[name.block_hash] = None
            seen.move_to_end(name.block_hash)
        while len(seen) > self._max_blocks:
            seen.popitem(last=False)

    def cached_by_tier(self, prompt: Sequence[int]) -> dict[str, dict[Tier, int]]:
        names = compute_block_names(prompt, self._block_size)
        cached = {}
        for worker, seen in self._seen.items():
            matched = 0
            for name in names:
                if name.block_hash not in seen:
                    break
                matched += 1
            if matched:
                cached[worker] = {Tier.DEVICE: matched * self._block_size}
        return cached

    def remove(self, address: str, *, unless_incarnation: str | None = None) -> bool:
        """The worker left or restarted (or its event stream broke, which never happens
        in the benchmark): what was sent there is forgotten, as the old index did."""
        forgotten = self._seen.pop(address, None) is not None
        return super().remove(address, unless_incarnation=unless_incarnation) or forgotten


class RecordingClient:
    """A worker client that tells the index what it sent where (``WorkerClient``)."""

    def __init__(self, inner: WorkerClient, index: RouterMemoryIndex) -> None:
        self._inner = inner
        self._index = index
        self.address = inner.address

    async def prefill(
        self,
        request_id: str,
        prompt: Sequence[int],
        sampling: SamplingParams,
        *,
        timeout_s: float | None = None,
    ) -> PrefillReply:
        reply = await self._inner.prefill(request_id, prompt, sampling, timeout_s=timeout_s)
        self._index.record(self.address, prompt)
        return reply

    async def decode(
        self,
        request_id: str,
        prompt: Sequence[int],
        sampling: SamplingParams,
        *,
        remote_kv: RemoteKvHandle | None = None,
        first_token: int | None = None,
        timeout_s: float | None = None,
    ) -> AsyncIterator[DecodeChunk]:
        stream = self._inner.decode(
            request_id,
            prompt,
            sampling,
            remote_kv=remote_kv,
            first_token=first_token,
            timeout_s=timeout_s,
        )
        recorded = False
        try:
            async for chunk in stream:
                if not recorded:
                    self._index.record(self.address, prompt)
                    recorded = True
                yield chunk
        finally:  # leaving early must cancel the worker's stream too
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

    async def release(self, request_id: str, *, timeout_s: float | None = None) -> bool:
        return await self._inner.release(request_id, timeout_s=timeout_s)

    async def health(self, *, timeout_s: float | None = None) -> HealthInfo:
        return await self._inner.health(timeout_s=timeout_s)

    def kv_events(self) -> AsyncIterator[KvEventBatch]:
        return self._inner.kv_events()

    async def stats(self, *, timeout_s: float | None = None) -> WorkerStats:
        return await self._inner.stats(timeout_s=timeout_s)

    async def close(self) -> None:
        await self._inner.close()


def main(argv: Sequence[str] | None = None) -> int:
    """The frontend program around a ``RouterMemoryIndex`` hashing blocks as the
    reference engine does (its default block size)."""
    index = RouterMemoryIndex(ReferenceModelConfig().kv_block_size)

    def record(client: WorkerClient) -> WorkerClient:
        return RecordingClient(client, index)

    return frontend_main(argv, wrap_client=record, index=index)


if __name__ == "__main__":
    sys.exit(main())
