"""Per-peer state cached by (worker_id, incarnation): never serve a stale incarnation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from tandem.kv.envelope import AgentHeader, decode_metadata
from tandem.kv.errors import KvPeerError
from tandem.kv.transport import PeerInfo

StateT = TypeVar("StateT")


@dataclass(slots=True)
class _Entry(Generic[StateT]):
    incarnation: str
    state: StateT


class PeerTable(Generic[StateT]):
    """At most one cached state per worker_id, tagged with the incarnation it is for."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry[StateT]] = {}

    def get(self, peer: PeerInfo) -> StateT | None:
        """The state for exactly this incarnation, or None (also when a stale one exists)."""
        entry = self._entries.get(peer.worker_id)
        if entry is None or entry.incarnation != peer.incarnation:
            return None
        return entry.state

    def connected(self, peer: PeerInfo) -> StateT:
        """The state ``connect(peer)`` just cached (a concurrent ``forget()`` may drop it)."""
        state = self.get(peer)
        if state is None:
            raise KvPeerError(f"peer {peer.name} was dropped while connecting")
        return state

    def put(self, peer: PeerInfo, state: StateT) -> None:
        """Cache ``state``; the caller must have dropped any older incarnation first."""
        self._entries[peer.worker_id] = _Entry(peer.incarnation, state)

    def pop_stale(self, peer: PeerInfo) -> StateT | None:
        """Remove and return a cached state for another incarnation of ``peer``."""
        entry = self._entries.get(peer.worker_id)
        if entry is None or entry.incarnation == peer.incarnation:
            return None
        del self._entries[peer.worker_id]
        return entry.state

    def pop(self, worker_id: str) -> StateT | None:
        entry = self._entries.pop(worker_id, None)
        return None if entry is None else entry.state

    def pop_all(self) -> list[StateT]:
        states = [e.state for e in self._entries.values()]
        self._entries.clear()
        return states

    def __len__(self) -> int:
        return len(self._entries)


def parse_peer(peer: PeerInfo, backend: str) -> tuple[AgentHeader, bytes]:
    """Decode ``peer.metadata`` and check it really is this backend, worker and incarnation."""
    header, payload = decode_metadata(peer.metadata)
    if header.backend != backend:
        raise KvPeerError(
            f"peer {peer.name} speaks KV backend {header.backend!r}, this worker {backend!r}"
        )
    if (header.worker_id, header.incarnation) != (peer.worker_id, peer.incarnation):
        raise KvPeerError(
            f"metadata is for {header.worker_id}@{header.incarnation}, expected {peer.name}"
            " (stale metadata from a restarted worker?)"
        )
    return header, payload
