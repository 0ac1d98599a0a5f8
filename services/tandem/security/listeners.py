"""Where a member may listen without credentials: loopback only.

A worker or frontend started without ``--credentials`` speaks plaintext gRPC and KV;
that is only allowed on addresses no other host can reach (tests, one-machine setups).
"""

from __future__ import annotations

import ipaddress

from tandem.security.credentials import CredentialsError


def is_loopback(host: str) -> bool:
    """``localhost`` or an address in 127.0.0.0/8 or ::1 (never ``0.0.0.0``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_plaintext_bind(host: str, what: str) -> None:
    """Raise CredentialsError unless plaintext ``what`` may listen on ``host``."""
    if not is_loopback(host):
        raise CredentialsError(
            f"{what} would listen on {host or 'every address'} without credentials: pass "
            "--credentials DIR (the cluster's ca.crt, tls.crt, tls.key), or listen on "
            "127.0.0.1"
        )
