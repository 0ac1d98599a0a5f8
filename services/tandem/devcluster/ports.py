"""Free TCP ports on the loopback interface."""

from __future__ import annotations

import socket
from contextlib import ExitStack


def allocate_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports the kernel reports free on ``host``.

    Every socket stays bound until all ports are chosen, so one call never returns a
    duplicate. Another process can still take a port between our close and the
    component's bind; start-up then fails with the component's bind error in its log.
    """
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports
