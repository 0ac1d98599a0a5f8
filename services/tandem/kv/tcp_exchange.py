"""The reading side of one TCP KV exchange, on a blocking socket (a reading thread)."""

from __future__ import annotations

from collections.abc import Sequence

from tandem.kv import tcp_io as io
from tandem.kv import tcp_wire as wire
from tandem.kv.errors import KvTransferError

# Bytes per socket call: large enough for throughput, small enough to stay responsive.
CHUNK_BYTES = 4 << 20


class StaleConnection(Exception):
    """A pooled connection was closed by the peer before it answered (retry fresh)."""


def exchange_on(conn: io.Conn, request: bytes, targets: Sequence[memoryview], pooled: bool) -> None:
    """(On a reading thread.) Send ``request`` and fill ``targets`` from the answer.
    Raises ``StaleConnection`` when a pooled connection turns out closed before the
    peer answered anything (the caller closes ``conn`` on any other failure)."""
    answered = False
    try:
        io.send_all(conn, request)
        head = io.recv_exactly(conn, wire.STATUS_BYTES)
        answered = True
        if wire.decode_status(head) != wire.STATUS_OK:
            size = wire.decode_error_len(io.recv_exactly(conn, wire.ERROR_LEN_BYTES))
            message = io.recv_exactly(conn, size).decode(errors="replace")
            raise KvTransferError(f"peer refused: {message}", peer="", nbytes=0)
        total = wire.decode_total(io.recv_exactly(conn, wire.TOTAL_BYTES))
        expected = sum(len(t) for t in targets)
        if total != expected:
            raise wire.WireError(f"peer announced {total} bytes, expected {expected}")
        for target in targets:
            for start in range(0, len(target), CHUNK_BYTES):
                io.recv_into(conn, target[start : start + CHUNK_BYTES])
    except io.PeerClosed as exc:
        if pooled and not answered:
            conn.close()
            raise StaleConnection() from exc
        raise
