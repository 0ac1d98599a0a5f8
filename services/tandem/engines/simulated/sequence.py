"""One sequence in the simulated engine: where it stands, and its token chain."""

from __future__ import annotations

import enum
from collections.abc import Sequence as Seq
from dataclasses import dataclass

from tandem.engines.base import FinishReason
from tandem.kv.block_hashes import BlockName


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
    priority: int = 0  # SamplingParams.priority (an adopted sequence's from its first step)
    prompt: Seq[int] | None = None  # kept until prefilled (hashed then)
    seed: int | None = None
    stop_ids: tuple[int, ...] = ()
    computed: int = 0  # prompt tokens prefilled
    generated: int = 0
    hash_state: bytes = b""
    last_token: int = -1
    blocks: int = 0
    finish: FinishReason | None = None
    # With the prefix cache: the prompt's full blocks, how many of them the sequence
    # holds in the cache (``kv_reuse``), and the modelled seconds of onboarding its hit
    # from the offload tiers, paid by the step that first computes its prompt.
    names: Seq[BlockName] = ()
    held: int = 0
    onboard_s: float = 0.0
