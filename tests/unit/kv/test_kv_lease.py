from __future__ import annotations

import pytest

from tandem.kv.lease import LeaseTable, ReleaseOutcome


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def table(lease_s: float = 10.0, margin_s: float = 5.0) -> tuple[LeaseTable, FakeClock]:
    clock = FakeClock()
    return LeaseTable(lease_s=lease_s, clock=clock, margin_s=margin_s), clock


def expired_ids(leases: LeaseTable) -> list[str]:
    return [lease.request_id for lease in leases.pop_expired()]


def test_unclaimed_leases_run_out_after_their_duration_oldest_first() -> None:
    leases, clock = table()
    leases.hold("a", nbytes=100)
    clock.now += 3
    leases.hold("b", nbytes=50)
    assert leases.held_bytes == 150
    assert leases.next_expiry() == 1010.0
    clock.now = 1009.9
    assert expired_ids(leases) == []
    clock.now = 1013.0
    assert expired_ids(leases) == ["a", "b"]
    assert len(leases) == 0 and leases.next_expiry() is None


def test_a_claim_pins_past_the_lease_for_the_read_time_plus_the_margin() -> None:
    leases, clock = table(lease_s=10.0, margin_s=5.0)
    leases.hold("a")
    clock.now += 9.0  # just inside the lease
    claim = leases.claim("a", "d1@1", read_s=30.0)
    assert claim is not None
    assert claim.read_s == 10.0  # capped at the lease: nobody pins for ever
    assert claim.pinned_s == 15.0
    assert leases.pinned == 1
    clock.now += 14.9  # the unclaimed lease would have ended long ago
    assert expired_ids(leases) == []
    clock.now += 0.1
    assert expired_ids(leases) == ["a"]
    assert leases.pinned == 0


def test_no_claim_after_the_lease_ran_out_or_after_a_release() -> None:
    leases, clock = table(lease_s=10.0)
    leases.hold("late")
    clock.now += 10.0
    assert leases.claim("late", "d1@1", read_s=1.0) is None
    leases.hold("given-up")
    assert leases.release("given-up") is ReleaseOutcome.FREE_NOW
    assert leases.claim("given-up", "d1@1", read_s=1.0) is None
    assert leases.claim("never-held", "d1@1", read_s=1.0) is None


def test_the_claimers_release_frees_at_once() -> None:
    leases, _ = table()
    leases.hold("a")
    assert leases.claim("a", "d1@1", read_s=2.0) is not None
    assert leases.release("a", "d1@1") is ReleaseOutcome.FREE_NOW
    assert "a" not in leases
    assert leases.release("a", "d1@1") is ReleaseOutcome.UNKNOWN


def test_a_release_by_someone_else_waits_for_the_readers_pin() -> None:
    # The router gives a request up while a decode worker may be mid-read.
    leases, clock = table(lease_s=10.0, margin_s=5.0)
    leases.hold("a")
    assert leases.claim("a", "d1@1", read_s=2.0) is not None
    assert leases.release("a") is ReleaseOutcome.PINNED
    assert leases.claim("a", "d2@1", read_s=2.0) is None  # given up: no new reader
    clock.now += 6.9
    assert expired_ids(leases) == []
    clock.now += 0.1
    assert expired_ids(leases) == ["a"]


def test_two_claimers_each_keep_their_own_pin() -> None:
    # A retry on another decode worker reuses the same KV.
    leases, clock = table(lease_s=10.0, margin_s=1.0)
    leases.hold("a")
    assert leases.claim("a", "d1@1", read_s=8.0) is not None  # pinned until +9
    clock.now += 1.0
    assert leases.claim("a", "d2@1", read_s=2.0) is not None  # pinned until +4
    assert leases.release("a", "d2@1") is ReleaseOutcome.PINNED  # d1 may still read
    clock.now += 7.9
    assert expired_ids(leases) == []
    clock.now += 0.1
    assert expired_ids(leases) == ["a"]


def test_take_hands_only_an_unclaimed_live_lease_to_the_local_decoder() -> None:
    leases, clock = table(lease_s=10.0)
    leases.hold("own")
    assert leases.take("own") is True
    assert "own" not in leases and leases.take("own") is False
    leases.hold("claimed")
    assert leases.claim("claimed", "d1@1", read_s=1.0) is not None
    assert leases.take("claimed") is False
    leases.hold("late")
    clock.now += 10.0
    assert leases.take("late") is False


@pytest.mark.parametrize(("lease_s", "margin_s"), [(0.0, 1.0), (1.0, 0.0)])
def test_durations_must_be_positive(lease_s: float, margin_s: float) -> None:
    with pytest.raises(ValueError):
        LeaseTable(lease_s=lease_s, clock=FakeClock(), margin_s=margin_s)
