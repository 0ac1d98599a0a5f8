"""gRPC clients of peer workers (KvAgent, ClaimKv, Release), cached per address.

A peer is evicted — its channel closed and everything cached about it dropped (the
listeners registered with ``on_evict``: KV-agent metadata, transport connections) —
when a call to it fails ``UNAVAILABLE`` (it left or died), or when it has not been used
for ``idle_s`` (``evict_idle``, called periodically by the worker). A later call simply
creates a fresh client, so eviction never costs more than one reconnect.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from tandem.security.credentials import CredentialStore
from tandem.worker.client import WorkerClient

logger = logging.getLogger(__name__)


class PeerClients:
    def __init__(
        self,
        timeout_s: float,
        idle_s: float,
        clock: Callable[[], float],
        credentials: CredentialStore | None = None,
    ) -> None:
        self._timeout_s = timeout_s
        self._credentials = credentials
        self._idle_s = idle_s
        self._clock = clock
        self._clients: dict[str, WorkerClient] = {}
        self._last_used: dict[str, float] = {}
        self._listeners: list[Callable[[str], None]] = []
        self._closing: set[asyncio.Task[None]] = set()

    def get(self, address: str) -> WorkerClient:
        client = self._clients.get(address)
        if client is None:
            client = WorkerClient(
                address,
                timeout_s=self._timeout_s,
                on_unavailable=lambda: self.evict(address, "unavailable"),
                credentials=self._credentials,
            )
            self._clients[address] = client
        self._last_used[address] = self._clock()
        return client

    def on_evict(self, listener: Callable[[str], None]) -> None:
        """``listener(address)`` drops whatever else is cached about that peer."""
        self._listeners.append(listener)

    def evict(self, address: str, why: str) -> None:
        client = self._clients.pop(address, None)
        self._last_used.pop(address, None)
        if client is None:
            return
        logger.info("dropping peer %s (%s)", address, why)
        for listener in self._listeners:
            listener(address)
        # Calls already on it end by their own deadlines, not as cancellations.
        task = asyncio.get_running_loop().create_task(client.close(grace_s=self._timeout_s))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def evict_idle(self) -> list[str]:
        """Evict peers unused for ``idle_s``; returns their addresses."""
        cutoff = self._clock() - self._idle_s
        idle = [address for address, used in self._last_used.items() if used <= cutoff]
        for address in idle:
            self.evict(address, f"unused for {self._idle_s:g}s")
        return idle

    def __len__(self) -> int:
        return len(self._clients)

    async def close(self) -> None:
        clients = list(self._clients.values())
        self._clients.clear()
        self._last_used.clear()
        for client in clients:
            await client.close()
        await asyncio.gather(*self._closing, return_exceptions=True)
