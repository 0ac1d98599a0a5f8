"""The router's table of workers: membership, health, and load as the router sees it.

Load combines two views: what the router itself has in flight on a worker (exact,
immediate) and what the worker last reported in Stats (includes other routers' work,
but up to one health interval old). Taking the larger of the two never double counts
our own requests and never forgets other frontends'.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tandem.router.membership import Member
from tandem.router.policy import WorkerRole, WorkerSnapshot
from tandem.router.ports import HealthInfo, WorkerClient, WorkerClientFactory, WorkerStats
from tandem.worker.types import HealthStatus

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class WorkerState:
    member: Member
    client: WorkerClient
    health: HealthInfo | None = None
    stats: WorkerStats = field(default_factory=lambda: WorkerStats(0, 0, 0, 0, 0, 0, 0))
    healthy: bool = False
    removed: bool = False
    consecutive_failures: int = 0
    last_error: str = ""
    # Work this router has in flight here. "pending" = sent, first token not yet back.
    pending_requests: int = 0
    pending_tokens: int = 0
    active_sequences: int = 0
    # Measured from this router's prefills (prefill_rate.update_prefill_rate).
    prefill_tokens_per_second: float | None = None

    @property
    def key(self) -> str:
        return self.member.address

    @property
    def role(self) -> WorkerRole:
        if self.health is None:
            return self.member.role
        return WorkerRole(self.health.role.value)

    @property
    def draining(self) -> bool:
        return self.health is not None and self.health.status is HealthStatus.DRAINING

    @property
    def in_flight(self) -> int:
        return self.pending_requests + self.active_sequences

    def snapshot(self) -> WorkerSnapshot:
        stats = self.stats
        return WorkerSnapshot(
            key=self.member.address,
            role=self.role,
            healthy=self.healthy and not self.removed,
            draining=self.draining,
            queued_prefill_tokens=max(self.pending_tokens, stats.queued_prefill_tokens),
            queued_requests=max(self.pending_requests, stats.queued_requests),
            active_sequences=max(self.active_sequences, stats.active_sequences),
            kv_blocks_free=stats.kv_blocks_free,
            kv_blocks_total=stats.kv_blocks_total,
            kv_block_size=stats.kv_block_size,
            config_digest=self.health.config_digest if self.health else "",
            prefill_tokens_per_second=self.prefill_tokens_per_second,
        )


class WorkerTable:
    def __init__(self, client_factory: WorkerClientFactory) -> None:
        self._factory = client_factory
        self._workers: dict[str, WorkerState] = {}
        self._starting: tuple[Member, ...] = ()  # in membership, not ready: not routable

    def reconcile(self, members: Sequence[Member]) -> tuple[list[WorkerState], list[WorkerState]]:
        """Adopt the current membership: returns (added, newly removed) workers.

        Removed workers stay in the table, unroutable, until their in-flight requests
        finish (see ``collect_removed``), so a scale-down never cuts a stream. Starting
        members are only counted (``starting``); a ready worker that turns starting
        leaves the table as a removed one does."""
        self._starting = tuple(m for m in members if m.starting)
        wanted = {m.address: m for m in members if not m.starting}
        added, removed = [], []
        for address, member in wanted.items():
            state = self._workers.get(address)
            if state is None:
                state = WorkerState(member=member, client=self._factory(address))
                self._workers[address] = state
                added.append(state)
            elif state.removed or state.member != member:
                state.removed = False
                state.member = member
        for address, state in self._workers.items():
            if address not in wanted and not state.removed:
                state.removed = True
                removed.append(state)
        return added, removed

    def collect_removed(self) -> list[WorkerState]:
        """Drop removed workers with nothing in flight; the caller closes their clients."""
        done = [s for s in self._workers.values() if s.removed and s.in_flight == 0]
        for state in done:
            del self._workers[state.key]
        return done

    def starting(self, role: WorkerRole) -> int:
        """Members of ``role`` launched but not ready yet (a ``both`` worker counts for
        every role)."""
        return sum(1 for m in self._starting if m.role in (role, WorkerRole.BOTH))

    def get(self, key: str) -> WorkerState | None:
        return self._workers.get(key)

    def values(self) -> Iterable[WorkerState]:
        return self._workers.values()

    def snapshots(self) -> tuple[WorkerSnapshot, ...]:
        return tuple(state.snapshot() for state in self._workers.values())

    def pop_all(self) -> list[WorkerState]:
        states = list(self._workers.values())
        self._workers.clear()
        return states


@dataclass(frozen=True, slots=True)
class PoolLoad:
    """One pool's load as the autoscaler reads it."""

    workers: int = 0
    healthy: int = 0
    queued_requests: int = 0
    queued_tokens: int = 0
    active_sequences: int = 0
    kv_utilization: float = 0.0  # mean over healthy workers reporting KV


def compute_pool_loads(snapshots: Iterable[WorkerSnapshot]) -> dict[str, PoolLoad]:
    """Aggregate per pool. A ``both`` worker counts in the decode pool (it decodes)."""
    acc: dict[str, list[WorkerSnapshot]] = {"prefill": [], "decode": []}
    for snap in snapshots:
        pool = "prefill" if snap.role is WorkerRole.PREFILL else "decode"
        acc[pool].append(snap)
    loads = {}
    for pool, snaps in acc.items():
        reporting = [s for s in snaps if s.healthy and s.kv_blocks_total > 0]
        utilization = (
            sum(s.kv_utilization for s in reporting) / len(reporting) if reporting else 0.0
        )
        loads[pool] = PoolLoad(
            workers=len(snaps),
            healthy=sum(1 for s in snaps if s.available),
            queued_requests=sum(s.queued_requests for s in snaps),
            queued_tokens=sum(s.queued_prefill_tokens for s in snaps),
            active_sequences=sum(s.active_sequences for s in snaps),
            kv_utilization=utilization,
        )
    return loads
