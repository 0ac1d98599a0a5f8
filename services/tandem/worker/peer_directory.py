"""Decode side: KV-agent metadata of prefill workers, cached per incarnation.

A ``RemoteKv`` names the prefill worker's id, incarnation and gRPC address. The first
pull from an incarnation asks that worker's KvAgent RPC for its metadata and hands it to
the transport (``connect``); later pulls reuse it. If the worker at that address now
reports another incarnation, it restarted since the prefill: that KV is gone, and the
pull fails at once instead of reading memory of a process that no longer holds it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from tandem.kv import KvError, KvTransport, PeerInfo
from tandem.worker.client import WorkerClient
from tandem.worker.errors import KvHandoffFailed, KvLayoutMismatch, WorkerCallError
from tandem.worker.types import RemoteKvHandle

logger = logging.getLogger(__name__)


class PeerDirectory:
    def __init__(
        self,
        transport: KvTransport,
        client_for: Callable[[str], WorkerClient],
        timeout_s: float,
    ) -> None:
        self._transport = transport
        self._client_for = client_for
        self._timeout_s = timeout_s
        self._peers: dict[str, PeerInfo] = {}  # worker_id -> newest known incarnation
        self._addresses: dict[str, str] = {}  # worker_id -> its gRPC address
        self._pending: dict[tuple[str, str], asyncio.Future[PeerInfo]] = {}

    async def resolve(self, remote: RemoteKvHandle) -> PeerInfo:
        """The connected peer for ``remote``'s incarnation (one handshake per incarnation,
        however many pulls ask at once)."""
        cached = self._peers.get(remote.worker_id)
        if cached is not None and cached.incarnation == remote.incarnation:
            return cached
        key = (remote.worker_id, remote.incarnation)
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._handshake(remote))
            self._pending[key] = pending
            pending.add_done_callback(lambda done: self._settled(key, done))
        return await asyncio.shield(pending)

    def _settled(self, key: tuple[str, str], done: asyncio.Future[PeerInfo]) -> None:
        self._pending.pop(key, None)
        if not done.cancelled():
            done.exception()  # retrieved: waiters that left must not leave it unobserved

    async def _handshake(self, remote: RemoteKvHandle) -> PeerInfo:
        if remote.backend != self._transport.backend:
            raise KvLayoutMismatch(
                f"prefill worker {remote.worker_id} uses KV backend {remote.backend!r}, "
                f"this worker {self._transport.backend!r}"
            )
        client = self._client_for(remote.grpc_address)
        try:
            agent = await client.kv_agent(timeout_s=self._timeout_s)
        except WorkerCallError as exc:
            raise KvHandoffFailed(
                f"cannot reach prefill worker {remote.worker_id} for KV metadata: {exc.message}"
            ) from exc
        if (agent.worker_id, agent.incarnation) != (remote.worker_id, remote.incarnation):
            raise KvHandoffFailed(
                f"prefill worker at {remote.grpc_address} is now "
                f"{agent.worker_id}@{agent.incarnation}, not {remote.worker_id}@"
                f"{remote.incarnation}: it restarted and the KV is gone"
            )
        peer = PeerInfo(agent.worker_id, agent.incarnation, agent.metadata)
        try:
            await self._transport.connect(peer, self._timeout_s)
        except KvError as exc:
            raise KvHandoffFailed(f"KV handshake with {peer.name} failed: {exc.message}") from exc
        previous = self._peers.get(peer.worker_id)
        if previous is not None and previous.incarnation != peer.incarnation:
            logger.info("prefill worker %s restarted: now %s", peer.worker_id, peer.name)
        self._peers[peer.worker_id] = peer
        self._addresses[peer.worker_id] = remote.grpc_address
        return peer

    async def explain_failure(self, remote: RemoteKvHandle) -> str:
        """Why a pull from ``remote`` may have failed, for the error message: asks the
        address (briefly) who answers there now."""
        client = self._client_for(remote.grpc_address)
        try:
            agent = await client.kv_agent(timeout_s=min(self._timeout_s, 2.0))
        except WorkerCallError as exc:
            return f"{remote.grpc_address} does not answer ({exc.grpc_status})"
        if (agent.worker_id, agent.incarnation) != (remote.worker_id, remote.incarnation):
            return (
                f"{remote.grpc_address} is now {agent.worker_id}@{agent.incarnation}: "
                f"{remote.worker_id} restarted and the KV is gone"
            )
        return f"{remote.worker_id}@{remote.incarnation} is still up"

    def forget(self, worker_id: str) -> None:
        """Drop a peer after a failed transfer, so the next pull handshakes again."""
        self._peers.pop(worker_id, None)
        self._addresses.pop(worker_id, None)
        self._transport.forget(worker_id)

    def forget_address(self, address: str) -> None:
        """The worker at ``address`` left (or went idle): drop everything about it."""
        for worker_id in [w for w, a in self._addresses.items() if a == address]:
            self.forget(worker_id)

    def __len__(self) -> int:
        return len(self._peers)
