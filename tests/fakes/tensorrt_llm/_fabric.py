"""What the fake simulates behind the real API: a toy model and the cache transceiver.

Not part of TensorRT-LLM's API. The toy model is a deterministic function of the token
sequence, so a disaggregated request (context-only on one LLM, generation-only on
another) yields exactly the tokens an aggregated request yields — the property
TensorRT-LLM's own disaggregated tests assert. The "transceiver" keeps a context
request's KV (here: its prompt and first token) until a generation-only request pulls
it, keyed by the context instance's endpoint and request id, as the real
``ctx_info_endpoint`` / ``ctx_request_id`` pair addresses it.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass

VOCAB_SIZE = 1000
_instances = itertools.count()


def next_token(tokens: Sequence[int]) -> int:
    """The toy model: depends on the last two tokens and the position."""
    last = tokens[-1] if tokens else 0
    before = tokens[-2] if len(tokens) > 1 else 0
    return (last * 31 + before * 7 + len(tokens)) % (VOCAB_SIZE - 3) + 3


def new_endpoint() -> str:
    return f"fake-transceiver-{next(_instances)}"


@dataclass(frozen=True, slots=True)
class ParkedKv:
    prompt: tuple[int, ...]
    first_tokens: tuple[int, ...]
    opaque_state: bytes
    backend: str
    blocks: int


class Transceiver:
    """All fake LLM instances of the process share one (they may be 'on other nodes')."""

    def __init__(self) -> None:
        self._parked: dict[tuple[str, int], ParkedKv] = {}

    def park(self, endpoint: str, request_id: int, kv: ParkedKv) -> None:
        self._parked[(endpoint, request_id)] = kv

    def pull(self, endpoint: str, request_id: int) -> ParkedKv | None:
        return self._parked.pop((endpoint, request_id), None)

    def parked_blocks(self, endpoint: str) -> int:
        return sum(kv.blocks for (owner, _), kv in self._parked.items() if owner == endpoint)

    def parked_count(self, endpoint: str) -> int:
        return sum(1 for owner, _ in self._parked if owner == endpoint)


TRANSCEIVER = Transceiver()


def new_opaque_state() -> bytes:
    # Binary on purpose: the handoff must carry arbitrary bytes (NUL, 0xff).
    return b"\x00\xff" + os.urandom(14)
