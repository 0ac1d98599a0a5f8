"""Prefill-side bookkeeping of sequences held for a decode worker to pull (pure).

A prefilled sequence's KV blocks stay allocated until the decode side says ``Release``.
If the decode side vanishes, the lease runs out and the worker frees the blocks. The
clock is injected, so the table is deterministic under test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Lease:
    request_id: str
    expires_at: float
    nbytes: int


class LeaseTable:
    def __init__(self, lease_s: float, clock: Callable[[], float]) -> None:
        if lease_s <= 0:
            raise ValueError("lease_s must be positive")
        self._lease_s = lease_s
        self._clock = clock
        self._leases: dict[str, Lease] = {}

    @property
    def lease_s(self) -> float:
        return self._lease_s

    def hold(self, request_id: str, nbytes: int = 0) -> Lease:
        """Start (or renew) the lease of ``request_id``; returns it with its expiry."""
        lease = Lease(request_id, self._clock() + self._lease_s, nbytes)
        self._leases[request_id] = lease
        return lease

    def release(self, request_id: str) -> bool:
        """End a lease; False when it was unknown (already released or expired)."""
        return self._leases.pop(request_id, None) is not None

    def pop_expired(self) -> list[Lease]:
        """Remove and return every lease whose expiry has passed, oldest first."""
        now = self._clock()
        expired = sorted(
            (lease for lease in self._leases.values() if lease.expires_at <= now),
            key=lambda lease: lease.expires_at,
        )
        for lease in expired:
            del self._leases[lease.request_id]
        return expired

    def next_expiry(self) -> float | None:
        return min((lease.expires_at for lease in self._leases.values()), default=None)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._leases

    def __len__(self) -> int:
        return len(self._leases)

    @property
    def held_bytes(self) -> int:
        return sum(lease.nbytes for lease in self._leases.values())
