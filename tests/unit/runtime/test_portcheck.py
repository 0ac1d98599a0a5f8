"""The one port probe: TIME_WAIT is not "in use", a listener is, and it is named."""

from __future__ import annotations

import os
import socket

import pytest

from tandem.errors import already_running
from tandem.portcheck import PortError, PortInUseError, check_port_free

HOST = "127.0.0.1"


def _leave_time_wait() -> int:
    """A port whose only sockets are in TIME_WAIT: a server closed a connection first
    (as uvicorn does on shutdown) and stopped listening."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((HOST, 0))
    listener.listen()
    port: int = listener.getsockname()[1]
    client = socket.create_connection((HOST, port))
    served, _ = listener.accept()
    served.close()  # the server side closes first: its end of the port goes TIME_WAIT
    client.recv(1)
    client.close()
    listener.close()
    return port


def test_a_port_left_in_time_wait_is_free() -> None:
    port = _leave_time_wait()
    # The old probe (a bind without SO_REUSEADDR) called this port "in use" for a minute.
    with socket.socket() as naive, pytest.raises(OSError):
        naive.bind((HOST, port))
    check_port_free(HOST, port)


def test_a_listener_makes_the_port_in_use_and_is_named() -> None:
    with socket.socket() as listener:
        listener.bind((HOST, 0))
        listener.listen()
        port = listener.getsockname()[1]
        with pytest.raises(PortInUseError) as caught:
            check_port_free(HOST, port)
    holder = caught.value.holder
    assert holder is not None and holder.pid == os.getpid()
    assert str(caught.value) == f"port {port} on {HOST} is in use by {holder}"
    assert "python" in holder.command and "\n" not in holder.command


def test_a_listener_on_every_address_counts_for_loopback() -> None:
    with socket.socket() as listener:
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with pytest.raises(PortInUseError) as caught:
            check_port_free(HOST, port)
    assert caught.value.holder is not None and caught.value.holder.pid == os.getpid()


def test_an_address_this_machine_does_not_have_is_its_own_error() -> None:
    with pytest.raises(PortError) as caught:
        check_port_free("192.0.2.1", 8000)  # TEST-NET-1: never assigned here; no traffic
    assert not isinstance(caught.value, PortInUseError)
    assert str(caught.value).startswith("cannot listen on 192.0.2.1:8000: ")


@pytest.mark.parametrize(
    ("kwargs", "line"),
    [
        (
            {"pid": 12, "port": 8000, "fix": "`tandem down --name reference`"},
            "cluster 'reference' is already running (pid 12, port 8000): use it, or "
            "`tandem down --name reference` first",
        ),
        (
            {"fix": "`tandem dev cluster down`"},
            "cluster 'reference' is already running: use it, or `tandem dev cluster down` first",
        ),
        (
            {"port": 80, "fix": "x"},
            "cluster 'reference' is already running (port 80): use it, or x first",
        ),
    ],
)
def test_already_running_reads_the_same_everywhere(kwargs: dict[str, object], line: str) -> None:
    assert already_running("cluster 'reference'", **kwargs) == line  # type: ignore[arg-type]
