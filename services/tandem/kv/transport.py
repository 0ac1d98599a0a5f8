"""The KV transport seam: move a prefilled sequence's KV bytes between two workers.

Model
-----
Each engine exposes its KV memory as a few contiguous regions
(``Engine.kv_regions() -> Sequence[memoryview]``). A transfer copies a list of byte
ranges (``KvRange(region, offset, length)``) out of the *remote* (prefill-side) regions
into same-length *local* (decode-side) ranges. Transfers are READ-style: the decode side
pulls, the prefill side only serves memory it registered.

Caller sides and invariants
---------------------------
Both sides:
  ``register(regions)``
      Called exactly once, at startup, before anything else. The regions must stay
      alive and must not move for the transport's lifetime (the engine owns them).
  ``local_metadata() -> bytes``
      Side-effect free; valid after ``register``. What the worker's KvAgent RPC hands
      to peers: opaque to callers, safe to send over the network (never pickled).
  ``close()``
      Idempotent. Drops every peer and stops serving; pending reads fail.

Decode side (initiator):
  ``connect(peer, timeout_s)``
      Cached per ``(worker_id, incarnation)``: a second call with the same pair is a
      no-op. A *new* incarnation for a known ``worker_id`` first drops the stale peer and
      then handshakes with the new one, so state of a restarted peer is never used.
      Raises ``KvPeerError`` if the metadata is malformed or names another worker or
      incarnation, ``KvTransferError`` if the peer cannot be reached in time.
  ``read(peer, remote_ranges, local_ranges, timeout_s) -> TransferStats``
      Connects if needed, then copies ``remote_ranges[i]`` into ``local_ranges[i]``
      for every i. Every range is bounds-checked against the registered regions of its
      side before any byte moves (``KvRangeError``). Adjacent ranges are coalesced into
      one descriptor. Completes within ``timeout_s`` or raises ``KvTransferError``
      naming the peer, the bytes and what failed; the backend's transfer handle is
      released on every path, and after a failure the peer is dropped so the next call
      re-handshakes. While a read is in flight the local ranges belong to the
      transport: the caller must not hand them to anyone else until it returns.
  ``forget(worker_id)``
      Drop a peer (e.g. the worker left the pool). Unknown ids are ignored.

Prefill side (target):
  Serves reads only from registered regions and only inside them; it never writes.
  Whether a given sequence's blocks may be read is the worker's business (leases and
  claims, ``kv.lease``), not the transport's.
  ``expect_reads(count)``
      The worker says how many claimed reads may be in flight now. A backend whose
      target side must make progress for a read to complete (UCX over TCP) does so only
      while ``count > 0``; idle, it costs nothing.

Transports are used from one asyncio event loop; they are not thread-safe.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from tandem.engines.base import KvRange


@dataclass(frozen=True, slots=True)
class PeerInfo:
    """How to reach one incarnation of a remote worker's KV agent."""

    worker_id: str
    incarnation: str
    metadata: bytes

    @property
    def name(self) -> str:
        """The peer's name in logs and errors (and its NIXL agent name)."""
        return agent_name(self.worker_id, self.incarnation)


@dataclass(frozen=True, slots=True)
class TransferStats:
    nbytes: int
    seconds: float
    descriptors: int  # after coalescing

    @property
    def bytes_per_second(self) -> float:
        return self.nbytes / self.seconds if self.seconds > 0 else 0.0


def agent_name(worker_id: str, incarnation: str) -> str:
    """A name unique per process start, so a restarted worker is a distinct agent."""
    return f"{worker_id}@{incarnation}"


class KvTransport(ABC):
    """One worker's end of KV transfers. See the module docstring for the contract."""

    backend: ClassVar[str]

    def __init__(self, worker_id: str, incarnation: str) -> None:
        self.worker_id = worker_id
        self.incarnation = incarnation
        # Called with the peer's identity whenever the prefill side refuses a reader
        # that authenticated but is not a worker (the worker counts these).
        self.on_refused_peer: Callable[[str], None] = lambda _identity: None

    @property
    def name(self) -> str:
        return agent_name(self.worker_id, self.incarnation)

    @abstractmethod
    async def register(self, regions: Sequence[memoryview]) -> None: ...

    @abstractmethod
    def local_metadata(self) -> bytes: ...

    @abstractmethod
    async def connect(self, peer: PeerInfo, timeout_s: float) -> None: ...

    @abstractmethod
    async def read(
        self,
        peer: PeerInfo,
        remote_ranges: Sequence[KvRange],
        local_ranges: Sequence[KvRange],
        timeout_s: float,
    ) -> TransferStats: ...

    def forget(self, worker_id: str) -> None:  # noqa: B027 - optional hook
        """Drop a peer; backends that cache per-peer state override this."""

    def expect_reads(self, count: int) -> None:  # noqa: B027 - optional hook
        """Prefill side: claimed reads that may be in flight now (see the contract)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release backend resources; the default has none."""
