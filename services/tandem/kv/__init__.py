"""KV cache transfer between prefill and decode workers (NIXL or TCP).

Import backends through ``make_transport``; this package never imports NIXL eagerly.
"""

from tandem.kv.errors import (
    KvBackendUnavailable,
    KvError,
    KvPeerError,
    KvRangeError,
    KvTransferError,
)
from tandem.kv.lease import Claim, Lease, LeaseTable, ReleaseOutcome
from tandem.kv.registry import backend_names, make_transport, nixl_available
from tandem.kv.transport import KvTransport, PeerInfo, TransferStats, agent_name

__all__ = [
    "Claim",
    "KvBackendUnavailable",
    "KvError",
    "KvPeerError",
    "KvRangeError",
    "KvTransferError",
    "KvTransport",
    "Lease",
    "LeaseTable",
    "PeerInfo",
    "ReleaseOutcome",
    "TransferStats",
    "agent_name",
    "backend_names",
    "make_transport",
    "nixl_available",
]
