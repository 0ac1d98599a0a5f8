"""One sequence in the simulated engine: where it stands, and its token chain."""

from __future__ import annotations

import enum
from collections.abc import Sequence as Seq
from dataclasses import dataclass

from tandem.engines.base import FinishReason


class SequenceState(enum.Enum):
    WAITING = "waiting"  # for KV (admission)
    PREFILLING = "prefilling"
    READY = "ready"  # prefilled or adopted and admitted: decodes when stepped
    RESERVED = "reserved"  # decode side: slot handed to the transport, not committed


@dataclass(slots=True)
class Sequence:
    prompt_len: int
    slot: int
    state: SequenceState
    local: bool  # prefills here (else adopted from another worker)
    max_tokens: int | None  # None: not known yet (adopted, before its first step)
    prompt: Seq[int] | None = None  # kept until prefilled (hashed then)
    seed: int | None = None
    stop_ids: tuple[int, ...] = ()
    computed: int = 0  # prompt tokens prefilled
    generated: int = 0
    hash_state: bytes = b""
    last_token: int = -1
    blocks: int = 0
    finish: FinishReason | None = None
