"""Errors raised by KV transports, rooted in the house ``TandemError``."""

from __future__ import annotations

from tandem.errors import TandemError


class KvError(TandemError):
    """Root of the KV package's errors (server-side failures: HTTP 503 by default)."""

    type = "server_error"
    code: str | None = "kv_error"
    http_status = 503

    def __init__(self, message: str) -> None:
        super().__init__(message)


class KvBackendUnavailable(KvError):
    """The requested transport backend cannot be loaded here (e.g. NIXL not installed)."""

    code: str | None = "kv_backend_unavailable"


class KvRangeError(KvError):
    """A byte range lies outside the registered KV regions or the two sides disagree."""

    code: str | None = "kv_range_invalid"
    http_status = 500


class KvPeerError(KvError):
    """Peer metadata is malformed, or belongs to a different worker or incarnation."""

    code: str | None = "kv_peer_invalid"


class KvTransferError(KvError):
    """A transfer failed: timeout, peer death, or a backend error.

    The message names the peer, the byte count and what failed; ``peer`` and ``nbytes``
    are kept for callers that log or count failures. ``local_unsafe`` means the backend
    could not stop the transfer: it may still write into the local ranges, which the
    caller must therefore never reuse.
    """

    code: str | None = "kv_transfer_failed"

    def __init__(self, message: str, *, peer: str, nbytes: int, local_unsafe: bool = False) -> None:
        super().__init__(message)
        self.peer = peer
        self.nbytes = nbytes
        self.local_unsafe = local_unsafe
