from __future__ import annotations

import pytest

from tandem.kv.lease import LeaseTable


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_leases_expire_after_their_duration_oldest_first() -> None:
    clock = FakeClock()
    table = LeaseTable(lease_s=10.0, clock=clock)
    table.hold("a", nbytes=100)
    clock.now += 3
    table.hold("b", nbytes=50)
    assert table.held_bytes == 150
    assert table.next_expiry() == 1010.0
    clock.now = 1009.9
    assert table.pop_expired() == []
    clock.now = 1013.0
    assert [lease.request_id for lease in table.pop_expired()] == ["a", "b"]
    assert len(table) == 0
    assert table.next_expiry() is None


def test_release_ends_a_lease_once() -> None:
    clock = FakeClock()
    table = LeaseTable(lease_s=5.0, clock=clock)
    lease = table.hold("a")
    assert lease.expires_at == clock.now + 5.0
    assert "a" in table
    assert table.release("a") is True
    assert table.release("a") is False
    clock.now += 100
    assert table.pop_expired() == []


def test_hold_again_renews() -> None:
    clock = FakeClock()
    table = LeaseTable(lease_s=5.0, clock=clock)
    table.hold("a")
    clock.now += 4
    table.hold("a")
    clock.now += 4
    assert table.pop_expired() == []
    clock.now += 1
    assert [lease.request_id for lease in table.pop_expired()] == ["a"]


def test_lease_must_be_positive() -> None:
    with pytest.raises(ValueError):
        LeaseTable(lease_s=0, clock=FakeClock())
