from __future__ import annotations

import pytest

from tandem.engines.base import KvRange
from tandem.kv import tcp_wire as wire


def test_request_round_trips() -> None:
    ranges = (KvRange(0, 0, 10), KvRange(3, 2**40, 2**33))
    raw = wire.encode_request("inc-é", ranges)
    size = wire.decode_request_prefix(raw[: wire.REQUEST_PREFIX_BYTES])
    rest = raw[wire.REQUEST_PREFIX_BYTES :]
    assert rest[:size].decode() == "inc-é"
    count = wire.decode_count(rest[size : size + wire.COUNT_BYTES])
    assert count == 2
    assert wire.decode_ranges(rest[size + wire.COUNT_BYTES :]) == ranges


def test_responses_round_trip() -> None:
    ok = wire.encode_ok(12345)
    assert wire.decode_status(ok[: wire.STATUS_BYTES]) == wire.STATUS_OK
    assert wire.decode_total(ok[wire.STATUS_BYTES :]) == 12345
    err = wire.encode_error("nope")
    assert wire.decode_status(err[: wire.STATUS_BYTES]) == wire.STATUS_ERROR
    size = wire.decode_error_len(err[wire.STATUS_BYTES : wire.STATUS_BYTES + wire.ERROR_LEN_BYTES])
    assert err[-size:] == b"nope"


@pytest.mark.parametrize(
    ("decode", "raw"),
    [
        (wire.decode_request_prefix, b"HTTP/1.1"[: wire.REQUEST_PREFIX_BYTES]),
        (wire.decode_count, (wire.MAX_RANGES + 1).to_bytes(4, "little")),
        (wire.decode_ranges, b"\x00" * (wire.RANGE_BYTES - 1)),
        (wire.decode_status, b"TKVA\x07"),
        (wire.decode_status, b"XXXX\x00"),
        (wire.decode_error_len, (wire.MAX_ERROR_BYTES + 1).to_bytes(4, "little")),
    ],
)
def test_malformed_frames_are_rejected(decode: object, raw: bytes) -> None:
    assert callable(decode)
    with pytest.raises(wire.WireError):
        decode(raw)


def test_too_many_ranges_cannot_be_encoded() -> None:
    with pytest.raises(wire.WireError):
        wire.encode_request("i", [KvRange(0, 0, 1)] * (wire.MAX_RANGES + 1))
