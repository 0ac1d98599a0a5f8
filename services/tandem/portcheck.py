"""May we listen on a TCP port, and if not, who listens there?

One probe for every place Tandem checks a port before serving on it (``tandem up``'s
frontend port, the operator's metrics port). It binds the way our servers bind (uvicorn
and aiohttp set ``SO_REUSEADDR``), so the TIME_WAIT connections a server leaves behind
when it stops do not count: only a listener makes a port "in use". When one does, the
error names the listening process, as far as this user may see it.
"""

from __future__ import annotations

import errno
import os
import socket
from dataclasses import dataclass

import psutil

_ANY_ADDRESS = ("0.0.0.0", "::", "")
_COMMAND_CHARS = 100


@dataclass(frozen=True, slots=True)
class PortHolder:
    """The process listening on a port."""

    pid: int
    command: str  # its command line, shortened; "" when it cannot be read

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.command})" if self.command else f"pid {self.pid}"


class PortError(Exception):
    """We cannot listen on ``host:port``; the message says why."""

    def __init__(self, host: str, port: int, message: str) -> None:
        super().__init__(message)
        self.host = host
        self.port = port
        self.message = message


class PortInUseError(PortError):
    """Another socket listens on the port; ``holder`` is its process when known."""

    def __init__(self, host: str, port: int, holder: PortHolder | None) -> None:
        by = f" by {holder}" if holder else ""
        super().__init__(host, port, f"port {port} on {host} is in use{by}")
        self.holder = holder


def find_listener(host: str, port: int) -> PortHolder | None:
    """The process listening on ``host:port`` (or on every address at ``port``)."""
    try:
        connections = psutil.net_connections("tcp")
    except psutil.Error:
        return None
    for conn in connections:
        if conn.status != psutil.CONN_LISTEN or not conn.laddr or conn.laddr.port != port:
            continue
        if conn.laddr.ip != host and conn.laddr.ip not in _ANY_ADDRESS and host not in _ANY_ADDRESS:
            continue
        if conn.pid is None:  # another user's socket: the kernel does not say whose
            return None
        return PortHolder(conn.pid, _command(conn.pid))
    return None


def _command(pid: int) -> str:
    try:
        argv = psutil.Process(pid).cmdline()
    except psutil.Error:
        return ""
    if not argv:
        return ""
    # One line, whatever the arguments hold (``python -c`` scripts have newlines).
    text = " ".join(" ".join([os.path.basename(argv[0]), *argv[1:]]).split())
    return text if len(text) <= _COMMAND_CHARS else text[: _COMMAND_CHARS - 3] + "..."


def bind_error(host: str, port: int, exc: OSError) -> PortError:
    """The :class:`PortError` for a failed bind of ``host:port``."""
    if exc.errno == errno.EADDRINUSE:
        return PortInUseError(host, port, find_listener(host, port))
    return PortError(host, port, f"cannot listen on {host}:{port}: {exc.strerror or exc}")


def check_port_free(host: str, port: int) -> None:
    """Raise :class:`PortError` unless a server could listen on ``host:port`` now."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise bind_error(host, port, exc) from None
