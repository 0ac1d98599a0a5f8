"""TensorRT-LLM's disaggregated params, carried from prefill to decode as plain bytes.

The prefill worker's context-only request returns ``DisaggregatedParams`` (the context
request id, TensorRT-LLM's ``opaque_state`` describing where the KV lives, the first
generated token(s), ...). They travel to the decode worker inside
``PrefillResult.opaque`` through Tandem's gRPC API, so the encoding is JSON with the one
binary field in base64 — never pickle: the bytes cross a network and a process
boundary, and decoding them must not run code. Decoding validates every field's type and
caps the size.

Fields are carried by name and only when set. A field Tandem does not know how to carry
but that is set fails the encode loudly rather than silently losing state (a wrong KV
handle surfaces as garbage tokens much later).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tandem.engines.base import EngineError

FORMAT = "tandem.trtllm.disaggregated-params"
FORMAT_VERSION = 1
MAX_HANDOFF_BYTES = 1 << 20

_INT = "int"
_STR = "str"
_BYTES = "bytes"
_INT_LIST = "int-list"

# DisaggregatedParams fields the decode side needs (tensorrt_llm/disaggregated_params.py).
CARRIED_FIELDS: Mapping[str, str] = {
    "first_gen_tokens": _INT_LIST,
    "ctx_request_id": _INT,
    "opaque_state": _BYTES,
    "draft_tokens": _INT_LIST,
    "disagg_request_id": _INT,
    "ctx_dp_rank": _INT,
    "ctx_info_endpoint": _STR,
    "schedule_style": _INT,
}
# Set by each side itself (request_type) or only present when logprobs, logits or
# multimodal inputs are requested, which the trtllm engine does not do.
IGNORED_FIELDS = frozenset(
    {
        "request_type",
        "first_gen_log_probs",
        "first_gen_logits",
        "ctx_usage",
        "multimodal_embedding_handles",
        "multimodal_hashes",
        "mrope_position_ids_handle",
        "mrope_position_deltas_handle",
    }
)


class HandoffError(EngineError):
    """Disaggregated params could not be encoded or the bytes are not a valid handoff."""


@dataclass(frozen=True, slots=True)
class Handoff:
    """A decoded handoff: the TensorRT-LLM version that produced it and the keyword
    arguments for ``DisaggregatedParams`` (bytes already decoded)."""

    trtllm_version: str
    params: Mapping[str, Any]

    @property
    def first_gen_tokens(self) -> list[int]:
        return list(self.params["first_gen_tokens"])


def encode_handoff(params: object, *, trtllm_version: str) -> bytes:
    """``DisaggregatedParams`` (any dataclass-like object) -> handoff bytes."""
    carried: dict[str, Any] = {}
    for name, value in _fields_of(params).items():
        if value is None or name in IGNORED_FIELDS:
            continue
        kind = CARRIED_FIELDS.get(name)
        if kind is None:
            raise HandoffError(
                f"TensorRT-LLM set DisaggregatedParams.{name}, which Tandem cannot carry to "
                "the decode worker; refusing to drop it"
            )
        carried[name] = _to_wire(name, kind, value)
    _check_complete(carried)
    document = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "trtllm": trtllm_version,
        "params": carried,
    }
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def decode_handoff(data: bytes) -> Handoff:
    """Handoff bytes -> validated ``Handoff``; raises HandoffError naming the problem."""
    if len(data) > MAX_HANDOFF_BYTES:
        raise HandoffError(f"handoff is {len(data)} bytes, more than {MAX_HANDOFF_BYTES}")
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise HandoffError(f"handoff is not JSON: {error}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise HandoffError("handoff bytes are not TensorRT-LLM disaggregated params")
    if document.get("version") != FORMAT_VERSION:
        raise HandoffError(
            f"handoff format version {document.get('version')!r} is not {FORMAT_VERSION}"
        )
    version, wire = document.get("trtllm"), document.get("params")
    if not isinstance(version, str) or not isinstance(wire, dict):
        raise HandoffError("handoff lacks the TensorRT-LLM version or its params")
    params: dict[str, Any] = {}
    for name, value in wire.items():
        kind = CARRIED_FIELDS.get(name)
        if kind is None:
            raise HandoffError(f"handoff carries unknown field {name!r}")
        params[name] = _from_wire(name, kind, value)
    _check_complete(params)
    return Handoff(trtllm_version=version, params=params)


def _fields_of(params: object) -> dict[str, Any]:
    if dataclasses.is_dataclass(params) and not isinstance(params, type):
        return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}
    return dict(vars(params))


def _check_complete(params: Mapping[str, Any]) -> None:
    if not params.get("first_gen_tokens"):
        raise HandoffError("disaggregated params carry no first generated token")
    if params.get("ctx_request_id") is None and params.get("disagg_request_id") is None:
        raise HandoffError("disaggregated params carry no context request id")


def _to_wire(name: str, kind: str, value: Any) -> Any:
    if kind == _BYTES:
        if not isinstance(value, bytes | bytearray):
            raise HandoffError(f"DisaggregatedParams.{name} is not bytes")
        return base64.b64encode(bytes(value)).decode("ascii")
    if kind == _INT_LIST:
        return [_as_int(name, v) for v in value]
    if kind == _INT:
        return _as_int(name, value)
    if not isinstance(value, str):
        raise HandoffError(f"DisaggregatedParams.{name} is not a string")
    return value


def _from_wire(name: str, kind: str, value: Any) -> Any:
    if kind == _BYTES:
        if not isinstance(value, str):
            raise HandoffError(f"handoff field {name} is not base64 text")
        try:
            return base64.b64decode(value.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise HandoffError(f"handoff field {name} is not valid base64") from None
    if kind == _INT_LIST:
        if not isinstance(value, list):
            raise HandoffError(f"handoff field {name} is not a list")
        return [_strict_int(name, v) for v in value]
    if kind == _INT:
        return _strict_int(name, value)
    if not isinstance(value, str):
        raise HandoffError(f"handoff field {name} is not a string")
    return value


def _as_int(name: str, value: Any) -> int:
    # Accepts int subclasses such as IntEnum (schedule_style) but not bool.
    if isinstance(value, bool) or not isinstance(value, int):
        raise HandoffError(f"DisaggregatedParams.{name} holds a non-integer {value!r}")
    return int(value)


def _strict_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise HandoffError(f"handoff field {name} holds a non-integer {value!r}")
    return int(value)
