"""EndpointSlice membership: which endpoints of a Service are workers (pure part)."""

from __future__ import annotations

from typing import Any

import pytest

from tandem.router.endpoint_slices import (
    ServiceTarget,
    compute_members,
    parse_service_target,
)
from tandem.router.membership import Member
from tandem.router.policy import WorkerRole

D = WorkerRole.DECODE


def endpoint(address: str, **conditions: bool) -> dict[str, Any]:
    return {"addresses": [address], "conditions": conditions}


def slice_(
    *endpoints: dict[str, Any],
    ports: list[dict[str, Any]] | None = None,
    address_type: str = "IPv4",
) -> dict[str, Any]:
    return {
        "addressType": address_type,
        "endpoints": list(endpoints),
        "ports": [{"name": "grpc", "port": 50051}] if ports is None else ports,
    }


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("kubernetes:///ref-decode.serving:grpc", ServiceTarget("serving", "ref-decode", "grpc")),
        ("kubernetes:///ref-decode.serving:50051", ServiceTarget("serving", "ref-decode", 50051)),
    ],
)
def test_targets_parse(target: str, expected: ServiceTarget) -> None:
    assert parse_service_target(target) == expected


@pytest.mark.parametrize(
    "target",
    [
        "dns:///ref-decode.serving:50051",  # not ours
        "kubernetes:///ref-decode:grpc",  # no namespace
        "kubernetes:///ref-decode.serving.svc:grpc",  # a DNS name, not SERVICE.NAMESPACE
        "kubernetes:///ref-decode.serving",  # no port
        "kubernetes:///.serving:grpc",  # no service
        "kubernetes:///ref-decode.serving:70000",  # port out of range
    ],
)
def test_malformed_targets_are_refused(target: str) -> None:
    with pytest.raises(ValueError, match=r"kubernetes:///|out of range"):
        parse_service_target(target)


@pytest.mark.parametrize(
    ("slices", "port", "expected"),
    [
        # Ready, absent ready (the API says: interpret as ready).
        (
            [slice_(endpoint("10.0.0.2", ready=True), endpoint("10.0.0.3"))],
            "grpc",
            ["10.0.0.2:50051", "10.0.0.3:50051"],
        ),
        # Not ready and not terminating: a pod starting, known but never routed to.
        ([slice_(endpoint("10.0.0.2", ready=False))], "grpc", ["10.0.0.2:50051 starting"]),
        # Ready in one slice, not ready in another (a slice lagging): ready.
        (
            [slice_(endpoint("10.0.0.2", ready=False)), slice_(endpoint("10.0.0.2"))],
            "grpc",
            ["10.0.0.2:50051"],
        ),
        # A terminating pod's endpoint is not ready even while it still serves: it
        # finishes what it has but gets nothing new.
        (
            [slice_(endpoint("10.0.0.2", ready=False, serving=True, terminating=True))],
            "grpc",
            [],
        ),
        # The port is looked up by name in each slice, or matched by number.
        ([slice_(endpoint("10.0.0.2"), ports=[{"name": "http", "port": 9090}])], "grpc", []),
        (
            [slice_(endpoint("10.0.0.2"), ports=[{"name": "grpc", "port": 6000}])],
            "grpc",
            ["10.0.0.2:6000"],
        ),
        ([slice_(endpoint("10.0.0.2"))], 50051, ["10.0.0.2:50051"]),
        ([slice_(endpoint("10.0.0.2"))], 50052, []),
        # Several slices, duplicates across them, stable order.
        (
            [slice_(endpoint("10.0.0.9"), endpoint("10.0.0.2")), slice_(endpoint("10.0.0.2"))],
            "grpc",
            ["10.0.0.2:50051", "10.0.0.9:50051"],
        ),
        # IPv6 addresses are bracketed; FQDN slices name no pod.
        ([slice_(endpoint("fd00::5"), address_type="IPv6")], "grpc", ["[fd00::5]:50051"]),
        ([slice_(endpoint("w.example"), address_type="FQDN")], "grpc", []),
        # A slice with no endpoints yet (a new Service).
        ([{"addressType": "IPv4", "endpoints": None, "ports": None}], "grpc", []),
    ],
)
def test_members_are_the_ready_and_starting_endpoints(
    slices: list[dict[str, Any]], port: str | int, expected: list[str]
) -> None:
    """``expected``: addresses, those of starting members marked " starting"."""
    want = tuple(Member(a.removesuffix(" starting"), D, a.endswith(" starting")) for a in expected)
    assert compute_members(slices, port, D) == want
