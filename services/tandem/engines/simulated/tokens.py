"""Deterministic tokens and the KV payload that carries a sequence between workers.

A sequence's state is a 16-byte hash chain: ``h0 = H(prompt ids [, seed])``, token
``t_i`` is read from ``h_{i-1}`` (after a fixed answer prefix, the engine's
``answer_prefix``), and ``h_i = H(h_{i-1} || t_i)``. The answer therefore
depends only on the prompt (and seed), never on which worker, batch or step produced
it, so a disaggregated request must stream exactly what a local one streams -- provided
the handoff really delivered the prefill side's state: the decode side starts from
the bytes its transport wrote into the sequence's KV slot (``encode_payload`` /
``decode_payload``), which also carry the prompt length, the first token and a checksum.
"""

from __future__ import annotations

import array
import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

STATE_BYTES = 16
_PERSON = b"tandem-sim-v1"
# state, prompt length, first token, checksum of the three (8 bytes), padding.
_PAYLOAD = struct.Struct(f"<{STATE_BYTES}sII8s")
PAYLOAD_BYTES = 64


class PayloadError(ValueError):
    """The KV slot does not hold the sequence it should (a broken or missing transfer)."""


def hash_prompt(prompt: Sequence[int], seed: int | None = None) -> bytes:
    h = hashlib.blake2b(digest_size=STATE_BYTES, person=_PERSON)
    h.update(array.array("I", prompt).tobytes())
    if seed is not None:
        h.update(seed.to_bytes(8, "little", signed=True))
    return h.digest()


def choose_token(state: bytes, limit: int) -> int:
    """The token a state emits: uniform over [0, limit)."""
    return int.from_bytes(state[:8], "little") % limit


def advance_state(state: bytes, token: int) -> bytes:
    h = hashlib.blake2b(state, digest_size=STATE_BYTES, person=_PERSON)
    h.update(token.to_bytes(4, "little"))
    return h.digest()


@dataclass(frozen=True, slots=True)
class Payload:
    state: bytes  # h0: the prompt's state, before the first token
    prompt_len: int
    first_token: int


def encode_payload(payload: Payload) -> bytes:
    head = _PAYLOAD.pack(payload.state, payload.prompt_len, payload.first_token, b"\0" * 8)
    checksum = hashlib.blake2b(head, digest_size=8).digest()
    body = _PAYLOAD.pack(payload.state, payload.prompt_len, payload.first_token, checksum)
    return body.ljust(PAYLOAD_BYTES, b"\0")


def decode_payload(data: bytes, prompt_len: int, first_token: int) -> Payload:
    """The payload in ``data``, checked against what the decode side was told."""
    state, length, first, checksum = _PAYLOAD.unpack_from(data)
    head = _PAYLOAD.pack(state, length, first, b"\0" * 8)
    if hashlib.blake2b(head, digest_size=8).digest() != checksum:
        raise PayloadError("the KV slot's checksum does not match: the transfer did not land")
    if (length, first) != (prompt_len, first_token):
        raise PayloadError(
            f"the KV slot holds a sequence of {length} tokens starting with {first}, "
            f"expected {prompt_len} tokens starting with {first_token}"
        )
    return Payload(state, length, first)
