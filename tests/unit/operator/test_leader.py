"""The Lease protocol's decisions (the process-level behaviour is in tests/e2e)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from tandem_operator.kube.leader import Decision, LeaseRecord, decide, micro_time, record_from_lease


def record(holder: str, duration: int = 15) -> LeaseRecord:
    return LeaseRecord(holder, duration, "t0", "t1", 0, "7")


@pytest.mark.parametrize(
    ("lease", "observed_at", "now", "decision"),
    [
        (None, 0.0, 0.0, Decision.CREATE),
        (record("me"), 0.0, 100.0, Decision.RENEW),
        (record("other"), 0.0, 14.9, Decision.WAIT),  # still valid on our own clock
        (record("other"), 0.0, 15.0, Decision.TAKE),  # no renewal seen for leaseDuration
        (record("other"), 50.0, 60.0, Decision.WAIT),  # measured from when we saw it change
        (record(""), 0.0, 0.0, Decision.TAKE),  # released on shutdown
    ],
)
def test_decide(
    lease: LeaseRecord | None, observed_at: float, now: float, decision: Decision
) -> None:
    assert decide(lease, "me", observed_at=observed_at, now=now) is decision


def test_record_from_lease_reads_client_go_fields() -> None:
    lease = {
        "metadata": {"resourceVersion": "42"},
        "spec": {
            "holderIdentity": "pod-a",
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-01-01T00:00:00.000000Z",
            "renewTime": "2026-01-01T00:00:10.000000Z",
            "leaseTransitions": 3,
        },
    }
    parsed = record_from_lease(lease)
    assert (parsed.holder, parsed.duration_seconds, parsed.transitions) == ("pod-a", 15, 3)
    assert parsed.resource_version == "42"
    assert record_from_lease({"spec": {}}).holder == ""


def test_micro_time_is_utc_with_microseconds() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=2)))
    assert micro_time(moment) == "2026-01-02T01:04:05.678901Z"
    assert micro_time(datetime(2026, 1, 1, tzinfo=UTC)).endswith(".000000Z")
