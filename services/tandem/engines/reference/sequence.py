"""One sequence's state inside the reference engine (its tokens, KV, prefix-cache names)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from tandem.engines.base import FinishReason, SamplingParams
from tandem.engines.reference.kv_pool import SequenceKv
from tandem.kv.block_hashes import ROOT, BlockName, compute_block_names


class SequenceState(enum.Enum):
    ONBOARDING = "onboarding"  # its cached prefix's last blocks coming back from the tiers
    PREFILLING = "prefilling"  # prompt chunks still to compute
    RESERVED = "reserved"  # decode side: KV being written by a transport
    ACTIVE = "active"


@dataclass(slots=True, eq=False)
class Sequence:
    tokens: list[int]  # prompt + generated; tokens[computed:] have no KV yet
    prompt_len: int
    kv: SequenceKv
    state: SequenceState
    sampling: SamplingParams
    computed: int = 0  # positions whose KV is in ``kv``
    # Names of the leading full blocks (the prompt's up front, generated ones as they fill).
    names: list[BlockName] = field(default_factory=list)
    stored: int = 0  # leading full blocks already offered to the prefix cache
    caching: bool = True  # False once a block could not be cached: none after it can be
    peak_blocks: int = 0  # while prefilling: the most blocks it may hold
    finish: FinishReason | None = None

    def full_block_names(self, block_size: int) -> list[BlockName]:
        """Names of every full block with KV, extending ``names`` as needed."""
        full = self.computed // block_size
        if len(self.names) < full:
            parent = self.names[-1].block_hash if self.names else ROOT
            start = len(self.names) * block_size
            self.names += compute_block_names(
                self.tokens[start : full * block_size], block_size, parent
            )
        return self.names[:full]
