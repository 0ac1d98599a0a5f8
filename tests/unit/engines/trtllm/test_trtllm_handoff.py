"""The disaggregated-params handoff: safe encoding, strict decoding, no silent loss."""

from __future__ import annotations

import base64
import json
import pickle
from dataclasses import dataclass
from enum import IntEnum

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tandem.engines.trtllm.handoff import (
    MAX_HANDOFF_BYTES,
    HandoffError,
    decode_handoff,
    encode_handoff,
)


class Style(IntEnum):
    CONTEXT_FIRST = 0
    GENERATION_FIRST = 1


@dataclass(kw_only=True)
class Params:
    """Shaped like tensorrt_llm.DisaggregatedParams (v1.2-era fields)."""

    request_type: str | None = "context_only"
    first_gen_tokens: list[int] | None = None
    first_gen_log_probs: list[object] | None = None
    ctx_request_id: int | None = None
    opaque_state: bytes | None = None
    draft_tokens: list[int] | None = None
    disagg_request_id: int | None = None
    ctx_dp_rank: int | None = None
    ctx_info_endpoint: str | None = None
    schedule_style: Style | None = None


@given(
    first=st.lists(st.integers(0, 2**31), min_size=1, max_size=4),
    request_id=st.integers(0, 2**63 - 1),
    state=st.binary(max_size=512),
    draft=st.none() | st.lists(st.integers(0, 2**31), max_size=8),
    endpoint=st.none() | st.text(max_size=40),
)
def test_round_trip_preserves_every_carried_field(
    first: list[int], request_id: int, state: bytes, draft: list[int] | None, endpoint: str | None
) -> None:
    params = Params(
        first_gen_tokens=first,
        ctx_request_id=request_id,
        opaque_state=state,
        draft_tokens=draft,
        ctx_info_endpoint=endpoint,
        ctx_dp_rank=3,
        schedule_style=Style.GENERATION_FIRST,
    )
    handoff = decode_handoff(encode_handoff(params, trtllm_version="1.2.1"))
    assert handoff.trtllm_version == "1.2.1"
    assert handoff.first_gen_tokens == first
    expected = {
        "first_gen_tokens": first,
        "ctx_request_id": request_id,
        "opaque_state": state,
        "ctx_dp_rank": 3,
        "schedule_style": 1,
    }
    if draft is not None:
        expected["draft_tokens"] = draft
    if endpoint is not None:
        expected["ctx_info_endpoint"] = endpoint
    assert dict(handoff.params) == expected


def test_encoding_is_plain_json_with_base64_bytes() -> None:
    params = Params(first_gen_tokens=[7], ctx_request_id=1, opaque_state=b"\x00\xff\x80")
    document = json.loads(encode_handoff(params, trtllm_version="1.2.1"))
    assert document["params"]["opaque_state"] == base64.b64encode(b"\x00\xff\x80").decode()
    assert "request_type" not in document["params"]


def test_unknown_set_field_is_refused_rather_than_dropped() -> None:
    @dataclass
    class Newer(Params):
        kv_shard_map: dict[str, int] | None = None

    params = Newer(first_gen_tokens=[1], ctx_request_id=1, kv_shard_map={"a": 1})
    with pytest.raises(HandoffError, match="kv_shard_map"):
        encode_handoff(params, trtllm_version="1.2.1")


def test_logprob_fields_are_not_carried() -> None:
    params = Params(first_gen_tokens=[1], ctx_request_id=1, first_gen_log_probs=[{1: -0.1}])
    handoff = decode_handoff(encode_handoff(params, trtllm_version="1.2.1"))
    assert "first_gen_log_probs" not in handoff.params


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (Params(ctx_request_id=1), "no first generated token"),
        (Params(first_gen_tokens=[1]), "no context request id"),
        (Params(first_gen_tokens=[True], ctx_request_id=1), "non-integer"),
        (Params(first_gen_tokens=[1], ctx_request_id=1, opaque_state="text"), "not bytes"),  # type: ignore[arg-type]
    ],
)
def test_encode_rejects_incomplete_or_mistyped_params(params: Params, message: str) -> None:
    with pytest.raises(HandoffError, match=message):
        encode_handoff(params, trtllm_version="1.2.1")


def _document(**params: object) -> bytes:
    base: dict[str, object] = {"first_gen_tokens": [5], "ctx_request_id": 9}
    base.update(params)
    return json.dumps(
        {
            "format": "tandem.trtllm.disaggregated-params",
            "version": 1,
            "trtllm": "1.2.1",
            "params": base,
        }
    ).encode()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (pickle.dumps({"first_gen_tokens": [5]}), "not JSON"),
        (b'{"format": "something-else"}', "not TensorRT-LLM disaggregated params"),
        (
            json.dumps({"format": "tandem.trtllm.disaggregated-params", "version": 2}).encode(),
            "format version 2",
        ),
        (_document(opaque_state="***"), "not valid base64"),
        (_document(opaque_state=5), "not base64 text"),
        (_document(ctx_request_id=True), "non-integer"),
        (_document(ctx_request_id="9"), "non-integer"),
        (_document(first_gen_tokens=5), "not a list"),
        (_document(first_gen_tokens=[]), "no first generated token"),
        (_document(evil="__import__('os')"), "unknown field 'evil'"),
        (b"x" * (MAX_HANDOFF_BYTES + 1), "more than"),
    ],
)
def test_decode_rejects_anything_but_a_valid_handoff(data: bytes, message: str) -> None:
    with pytest.raises(HandoffError, match=message):
        decode_handoff(data)
