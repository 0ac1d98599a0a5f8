"""Free TCP ports on the loopback interface, outside the kernel's ephemeral range."""

from __future__ import annotations

import random
import socket
from contextlib import ExitStack
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# For hosts without the file (macOS): Linux's default (32768-60999) and macOS's
# (49152-65535) together, so no candidate lies in either.
DEFAULT_EPHEMERAL_RANGE = (32768, 65535)
# Above the fixed ports of what runs beside us (kubelet 10250, etcd 2379, ...).
FIRST_PORT = 20000
LAST_PORT = 65535
_SPARE = 64  # candidates tried beyond ``count`` before falling back to the kernel


def read_ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The range the kernel takes outgoing connections' local ports from."""
    try:
        low, high = (int(field) for field in path.read_text().split())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_RANGE
    return low, high


def list_candidate_ports(ephemeral: tuple[int, int]) -> list[int]:
    """Ports no outgoing connection can be given: from FIRST_PORT up, less the range."""
    low, high = ephemeral
    return [p for p in range(FIRST_PORT, LAST_PORT + 1) if not low <= p <= high]


def allocate_ports(
    count: int,
    host: str = "127.0.0.1",
    *,
    ephemeral: tuple[int, int] | None = None,
) -> list[int]:
    """``count`` distinct ports free on ``host``, none in the ephemeral range.

    A port is chosen here and bound later by the component we start. The kernel's own
    choice (bind to port 0) comes from the ephemeral range, which is also where every
    outgoing connection gets its local port, so under load a client could take it in
    between (a worker once failed to bind 127.0.0.1:50075 while aiperf ran). Outside
    that range only another listener choosing the same port could; each candidate is
    checked by binding it, and every socket stays bound until all are chosen, so one call
    never returns a duplicate. Falls back to the kernel's choice when no port lies
    outside the range."""
    candidates = list_candidate_ports(ephemeral or read_ephemeral_range())
    tries = random.sample(candidates, min(len(candidates), count + _SPARE))
    with ExitStack() as stack:
        ports: list[int] = []
        for port in [*tries, *[0] * count]:  # the kernel's choice only at the end
            if len(ports) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((host, port))
            except OSError:
                sock.close()
                continue
            stack.enter_context(sock)
            ports.append(int(sock.getsockname()[1]))
        if len(ports) < count:
            raise OSError(f"found {len(ports)} of {count} free ports on {host}")
        return ports
