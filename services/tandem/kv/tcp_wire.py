"""Framing of the TCP KV transport (pure: bytes in, values out).

One request per connection, little-endian:

    request  = b"TKVQ" | u16 len | incarnation (UTF-8) | u32 count | count * (u32 region,
               u64 offset, u64 length)
    response = b"TKVA" | u8 status | ...
               status 0: u64 total, then exactly ``total`` bytes: the ranges in order
               status 1: u32 len, then a UTF-8 error message

A request with ``count == 0`` is a handshake: it checks the incarnation and nothing else.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from tandem.engines.base import KvRange

REQUEST_MAGIC = b"TKVQ"
RESPONSE_MAGIC = b"TKVA"
MAX_RANGES = 1 << 20
MAX_ERROR_BYTES = 4096

STATUS_OK = 0
STATUS_ERROR = 1

_INCARNATION_LEN = struct.Struct("<H")
_COUNT = struct.Struct("<I")
_RANGE = struct.Struct("<IQQ")
_STATUS = struct.Struct("<4sB")
_TOTAL = struct.Struct("<Q")
_ERROR_LEN = struct.Struct("<I")

REQUEST_PREFIX_BYTES = len(REQUEST_MAGIC) + _INCARNATION_LEN.size
COUNT_BYTES = _COUNT.size
RANGE_BYTES = _RANGE.size
STATUS_BYTES = _STATUS.size
TOTAL_BYTES = _TOTAL.size
ERROR_LEN_BYTES = _ERROR_LEN.size


class WireError(ValueError):
    """Bytes that do not follow the framing above."""


def encode_request(incarnation: str, ranges: Sequence[KvRange]) -> bytes:
    if len(ranges) > MAX_RANGES:
        raise WireError(f"{len(ranges)} ranges exceed the limit of {MAX_RANGES} per request")
    name = incarnation.encode()
    parts = [REQUEST_MAGIC, _INCARNATION_LEN.pack(len(name)), name, _COUNT.pack(len(ranges))]
    parts.extend(_RANGE.pack(r.region, r.offset, r.length) for r in ranges)
    return b"".join(parts)


def decode_request_prefix(prefix: bytes) -> int:
    """Check the magic; return the incarnation's byte length that follows."""
    if prefix[: len(REQUEST_MAGIC)] != REQUEST_MAGIC:
        raise WireError("not a TKVQ request")
    (size,) = _INCARNATION_LEN.unpack_from(prefix, len(REQUEST_MAGIC))
    return int(size)


def decode_count(raw: bytes) -> int:
    (count,) = _COUNT.unpack(raw)
    if count > MAX_RANGES:
        raise WireError(f"request names {count} ranges; the limit is {MAX_RANGES}")
    return int(count)


def decode_ranges(raw: bytes) -> tuple[KvRange, ...]:
    if len(raw) % _RANGE.size:
        raise WireError("truncated range list")
    return tuple(
        KvRange(region, offset, length) for region, offset, length in _RANGE.iter_unpack(raw)
    )


def encode_ok(total: int) -> bytes:
    return _STATUS.pack(RESPONSE_MAGIC, STATUS_OK) + _TOTAL.pack(total)


def encode_error(message: str) -> bytes:
    raw = message.encode()[:MAX_ERROR_BYTES]
    return _STATUS.pack(RESPONSE_MAGIC, STATUS_ERROR) + _ERROR_LEN.pack(len(raw)) + raw


def decode_status(raw: bytes) -> int:
    magic, status = _STATUS.unpack(raw)
    if magic != RESPONSE_MAGIC or status not in (STATUS_OK, STATUS_ERROR):
        raise WireError("not a TKVA response")
    return int(status)


def decode_total(raw: bytes) -> int:
    (total,) = _TOTAL.unpack(raw)
    return int(total)


def decode_error_len(raw: bytes) -> int:
    (size,) = _ERROR_LEN.unpack(raw)
    if size > MAX_ERROR_BYTES:
        raise WireError(f"error message of {size} bytes exceeds {MAX_ERROR_BYTES}")
    return int(size)
