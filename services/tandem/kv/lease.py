"""Prefill-side fencing of sequences held for decode workers to pull (pure).

A prefilled sequence's KV blocks stay allocated ("held") until nobody can still be
reading them. Reads are one-sided (NIXL READ): the prefill side never sees them, so the
decode side announces each read with a *claim* before it starts:

- ``hold`` starts a lease: unclaimed, it lasts ``lease_s`` on this host's clock.
- ``claim(request_id, claimer, read_s)`` pins the blocks for ``read_s + margin_s`` from
  now (this host's clock) and answers how long the claimer may read (``read_s``, capped
  at ``lease_s``). The claimer measures that duration on *its own* monotonic clock,
  starting before it sent the claim, so its reads end before the pin does whatever the
  two hosts' wall clocks say: no timestamp ever crosses hosts.
- ``release(request_id, claimer)`` is the acknowledgement: that claimer is done. Once
  anyone released, no new claim is accepted; the blocks are freed as soon as no claim
  is still pinned, otherwise when the last pin runs out (``pop_expired``).

The clock is injected (monotonic in production) so the table is deterministic in tests.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field


class ReleaseOutcome(enum.Enum):
    FREE_NOW = "free_now"  # nobody can be reading: free the blocks
    PINNED = "pinned"  # another claimer may still read: freed when its pin runs out
    UNKNOWN = "unknown"  # not held here (already freed, expired, or never held)


@dataclass(slots=True)
class Lease:
    request_id: str
    nbytes: int
    # Until when an unclaimed lease waits for its first claim.
    unclaimed_until: float
    # claimer -> end of its pin (this host's clock).
    pins: dict[str, float] = field(default_factory=dict)
    released: bool = False

    @property
    def ends_at(self) -> float:
        """When the blocks may be freed if nothing else happens."""
        if self.pins:
            return max(self.pins.values())
        return float("-inf") if self.released else self.unclaimed_until


@dataclass(frozen=True, slots=True)
class Claim:
    """A granted claim: the claimer must finish reading within ``read_s`` of sending it."""

    request_id: str
    read_s: float
    pinned_s: float  # how long the blocks stay pinned from now, here (read_s + margin)


class LeaseTable:
    def __init__(
        self, lease_s: float, clock: Callable[[], float], *, margin_s: float = 5.0
    ) -> None:
        if lease_s <= 0:
            raise ValueError("lease_s must be positive")
        if margin_s <= 0:
            raise ValueError("margin_s must be positive")
        self._lease_s = lease_s
        self._margin_s = margin_s
        self._clock = clock
        self._leases: dict[str, Lease] = {}

    @property
    def lease_s(self) -> float:
        return self._lease_s

    @property
    def margin_s(self) -> float:
        return self._margin_s

    def hold(self, request_id: str, nbytes: int = 0) -> Lease:
        """Start the lease of a freshly prefilled ``request_id`` (waiting for a claim)."""
        lease = Lease(request_id, nbytes, self._clock() + self._lease_s)
        self._leases[request_id] = lease
        return lease

    def claim(self, request_id: str, claimer: str, read_s: float) -> Claim | None:
        """Pin the blocks for a read by ``claimer``; None when the lease is gone, has run
        out, or was already released (the KV must not be read any more)."""
        lease = self._leases.get(request_id)
        now = self._clock()
        if lease is None or lease.released or now >= lease.ends_at:
            return None
        granted = max(0.0, min(read_s, self._lease_s))
        pinned = granted + self._margin_s
        lease.pins[claimer] = max(lease.pins.get(claimer, now), now + pinned)
        return Claim(request_id, granted, pinned)

    def release(self, request_id: str, claimer: str | None = None) -> ReleaseOutcome:
        """``claimer`` finished (or, with None, someone who never read gave the request
        up). Returns whether the blocks can be freed now."""
        lease = self._leases.get(request_id)
        if lease is None:
            return ReleaseOutcome.UNKNOWN
        lease.released = True
        if claimer is not None:
            lease.pins.pop(claimer, None)
        now = self._clock()
        if any(end > now for end in lease.pins.values()):
            return ReleaseOutcome.PINNED
        del self._leases[request_id]
        return ReleaseOutcome.FREE_NOW

    def take(self, request_id: str) -> bool:
        """Hand a held, unclaimed sequence to this worker's own decode (role both): it
        leaves the table without being freed. False when it is gone or claimed."""
        lease = self._leases.get(request_id)
        if lease is None or lease.pins or lease.released:
            return False
        if self._clock() >= lease.ends_at:
            return False
        del self._leases[request_id]
        return True

    def pop_expired(self) -> list[Lease]:
        """Remove and return every lease whose blocks may now be freed, oldest first."""
        now = self._clock()
        expired = sorted(
            (lease for lease in self._leases.values() if lease.ends_at <= now),
            key=lambda lease: lease.ends_at,
        )
        for lease in expired:
            del self._leases[lease.request_id]
        return expired

    def next_expiry(self) -> float | None:
        return min((lease.ends_at for lease in self._leases.values()), default=None)

    @property
    def pinned(self) -> int:
        """Leases a decode worker may be reading right now (claimed, pin not run out)."""
        now = self._clock()
        leases = self._leases.values()
        return sum(1 for lease in leases if any(end > now for end in lease.pins.values()))

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._leases

    def __len__(self) -> int:
        return len(self._leases)

    @property
    def held_bytes(self) -> int:
        return sum(lease.nbytes for lease in self._leases.values())
