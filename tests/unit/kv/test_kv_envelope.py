from __future__ import annotations

import json
import struct

import pytest

from tandem.kv.envelope import MAGIC, AgentHeader, decode_metadata, encode_metadata
from tandem.kv.errors import KvPeerError
from tandem.kv.peers import PeerTable, parse_peer
from tandem.kv.transport import PeerInfo

HEADER = AgentHeader(
    backend="nixl",
    worker_id="prefill-0",
    incarnation="inc-1",
    regions=((140_000_000, 4096), (150_000_000, 8192)),
    host="127.0.0.1",
    port=5555,
)


def test_metadata_round_trips_header_and_payload() -> None:
    blob = encode_metadata(HEADER, b"\x00nixl-bytes\xff")
    header, payload = decode_metadata(blob)
    assert header == HEADER
    assert header.region_sizes == (4096, 8192)
    assert payload == b"\x00nixl-bytes\xff"


def _blob(fields: object) -> bytes:
    raw = json.dumps(fields).encode()
    return MAGIC + struct.pack("<I", len(raw)) + raw


GOOD = {
    "backend": "tcp",
    "worker_id": "w",
    "incarnation": "i",
    "regions": [[0, 1]],
    "host": "h",
    "port": 1,
}


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        b"TKV0" + b"\x00" * 8,
        MAGIC + struct.pack("<I", 1000) + b"{}",
        MAGIC + struct.pack("<I", 3) + b"{x}",
        _blob([1, 2]),
        _blob({**GOOD, "backend": 3}),
        _blob({**GOOD, "port": -1}),
        _blob({**GOOD, "port": True}),
        _blob({**GOOD, "regions": [[0]]}),
        _blob({**GOOD, "regions": [[0, -5]]}),
        _blob({**GOOD, "regions": "all"}),
        _blob({k: v for k, v in GOOD.items() if k != "incarnation"}),
    ],
)
def test_malformed_metadata_is_rejected(blob: bytes) -> None:
    with pytest.raises(KvPeerError):
        decode_metadata(blob)


def test_parse_peer_rejects_other_incarnation_and_backend() -> None:
    blob = encode_metadata(HEADER)
    assert parse_peer(PeerInfo("prefill-0", "inc-1", blob), "nixl")[0] == HEADER
    with pytest.raises(KvPeerError, match="restarted"):
        parse_peer(PeerInfo("prefill-0", "inc-2", blob), "nixl")
    with pytest.raises(KvPeerError, match="backend"):
        parse_peer(PeerInfo("prefill-0", "inc-1", blob), "tcp")


def test_peer_table_keeps_one_incarnation_per_worker() -> None:
    table: PeerTable[str] = PeerTable()
    old, new = PeerInfo("w", "1", b""), PeerInfo("w", "2", b"")
    table.put(old, "state-1")
    assert table.get(old) == "state-1"
    assert table.get(new) is None  # a stale entry is never returned for a new incarnation
    assert table.pop_stale(old) is None
    assert table.pop_stale(new) == "state-1"
    assert len(table) == 0
    table.put(new, "state-2")
    assert table.get(old) is None
    assert table.pop("w") == "state-2"
    assert table.pop("w") is None


def test_peer_table_connected_refuses_a_peer_dropped_meanwhile() -> None:
    table: PeerTable[str] = PeerTable()
    peer = PeerInfo("w", "1", b"")
    table.put(peer, "state-1")
    assert table.connected(peer) == "state-1"
    table.pop("w")  # what a concurrent forget() does between connect() and the lookup
    with pytest.raises(KvPeerError, match="w@1 was dropped while connecting"):
        table.connected(peer)
