"""Ports for the processes we start: free, distinct, and never ones an outgoing
connection can take (the kernel gives those from its ephemeral range)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tandem.devcluster.ports import (
    DEFAULT_EPHEMERAL_RANGE,
    FIRST_PORT,
    LAST_PORT,
    allocate_ports,
    read_ephemeral_range,
)

# Leaves exactly FIRST_PORT and FIRST_PORT + 1 outside the "ephemeral" range.
TWO_CANDIDATES = (FIRST_PORT + 2, LAST_PORT)


@contextmanager
def listening(port: int) -> Iterator[None]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        yield


def test_ports_are_distinct_bindable_and_outside_the_ephemeral_range() -> None:
    low, high = read_ephemeral_range()
    ports = allocate_ports(40)
    assert len(set(ports)) == 40
    assert all(FIRST_PORT <= p <= LAST_PORT and not low <= p <= high for p in ports)
    for port in ports:
        with listening(port):
            pass


def test_a_port_something_listens_on_is_passed_over() -> None:
    with listening(FIRST_PORT):
        assert {p for _ in range(10) for p in allocate_ports(1, ephemeral=TWO_CANDIDATES)} == {
            FIRST_PORT + 1
        }


def test_with_every_candidate_taken_the_kernel_chooses() -> None:
    with listening(FIRST_PORT), listening(FIRST_PORT + 1):
        (port,) = allocate_ports(1, ephemeral=TWO_CANDIDATES)
    assert port not in (FIRST_PORT, FIRST_PORT + 1)


def test_the_ephemeral_range_is_read_from_the_kernel_file(tmp_path: Path) -> None:
    path = tmp_path / "ip_local_port_range"
    path.write_text("40000\t50000\n")
    assert read_ephemeral_range(path) == (40000, 50000)
    path.write_text("garbage\n")
    assert read_ephemeral_range(path) == DEFAULT_EPHEMERAL_RANGE
    assert read_ephemeral_range(tmp_path / "missing") == DEFAULT_EPHEMERAL_RANGE
