"""The metadata blob a KV agent hands to its peers: a JSON header plus opaque payload.

Layout: ``b"TKV1" | u32 header length | header (UTF-8 JSON object) | payload``. The
payload is the backend's own blob (NIXL agent metadata) or empty. Peer bytes are parsed
with ``json`` and ``struct`` only: nothing from a peer is ever unpickled.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from tandem.kv.errors import KvPeerError

MAGIC = b"TKV1"
_LEN = struct.Struct("<I")
MAX_HEADER_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class AgentHeader:
    """What every backend's metadata says about its agent."""

    backend: str
    worker_id: str
    incarnation: str
    # (base address, length) per registered region; the address is 0 where a backend
    # does not need it (TCP serves by offset).
    regions: tuple[tuple[int, int], ...]
    host: str = ""
    port: int = 0

    @property
    def region_sizes(self) -> tuple[int, ...]:
        return tuple(length for _, length in self.regions)


def encode_metadata(header: AgentHeader, payload: bytes = b"") -> bytes:
    fields: Mapping[str, object] = {
        "backend": header.backend,
        "worker_id": header.worker_id,
        "incarnation": header.incarnation,
        "regions": [list(r) for r in header.regions],
        "host": header.host,
        "port": header.port,
    }
    raw = json.dumps(fields, separators=(",", ":")).encode()
    return MAGIC + _LEN.pack(len(raw)) + raw + payload


def decode_metadata(blob: bytes) -> tuple[AgentHeader, bytes]:
    """Parse peer metadata; raise KvPeerError on anything malformed."""
    prefix = len(MAGIC) + _LEN.size
    if len(blob) < prefix or blob[: len(MAGIC)] != MAGIC:
        raise KvPeerError("peer KV metadata has no TKV1 header")
    (size,) = _LEN.unpack_from(blob, len(MAGIC))
    if size > MAX_HEADER_BYTES or prefix + size > len(blob):
        raise KvPeerError(f"peer KV metadata header length {size} is invalid")
    try:
        fields = json.loads(blob[prefix : prefix + size])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise KvPeerError(f"peer KV metadata header is not JSON: {exc}") from exc
    if not isinstance(fields, dict):
        raise KvPeerError("peer KV metadata header is not a JSON object")
    header = AgentHeader(
        backend=_str(fields, "backend"),
        worker_id=_str(fields, "worker_id"),
        incarnation=_str(fields, "incarnation"),
        regions=_regions(fields.get("regions")),
        host=_str(fields, "host"),
        port=_int(fields, "port"),
    )
    return header, blob[prefix + size :]


def _str(fields: dict[str, object], key: str) -> str:
    value = fields.get(key)
    if not isinstance(value, str):
        raise KvPeerError(f"peer KV metadata field {key!r} must be a string")
    return value


def _int(fields: dict[str, object], key: str) -> int:
    value = fields.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise KvPeerError(f"peer KV metadata field {key!r} must be a non-negative integer")
    return value


def _regions(value: object) -> tuple[tuple[int, int], ...]:
    if not isinstance(value, list):
        raise KvPeerError("peer KV metadata field 'regions' must be a list")
    out: list[tuple[int, int]] = []
    for item in value:
        if (
            not isinstance(item, list)
            or len(item) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in item)
        ):
            raise KvPeerError("peer KV metadata regions must be [address, length] pairs")
        out.append((item[0], item[1]))
    return tuple(out)
