"""Domain types of the worker API (what ``worker.proto`` carries, as Python values)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from tandem.engines.base import FinishReason, KvRange
from tandem.kv.events import KvCacheEvent, Tier


class Role(enum.StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"
    BOTH = "both"

    @property
    def prefills_for_others(self) -> bool:
        """Serves the Prefill RPC (and holds KV for decode workers to pull)."""
        return self in (Role.PREFILL, Role.BOTH)

    @property
    def decodes(self) -> bool:
        """Serves the Decode RPC (local prefill or pulling remote KV)."""
        return self in (Role.DECODE, Role.BOTH)


class HealthStatus(enum.StrEnum):
    SERVING = "serving"
    DRAINING = "draining"
    NOT_SERVING = "not_serving"


@dataclass(frozen=True, slots=True)
class RemoteKvHandle:
    """Where a prefilled sequence's KV waits on a prefill worker, and how to reach it."""

    worker_id: str
    incarnation: str
    grpc_address: str
    backend: str
    num_tokens: int
    ranges: tuple[KvRange, ...]
    opaque: bytes = b""
    # The prefill engine's model + KV layout (``worker.digest``); a decode worker with
    # another digest refuses the KV.
    config_digest: str = ""

    @property
    def nbytes(self) -> int:
        return sum(r.length for r in self.ranges)


@dataclass(frozen=True, slots=True)
class PrefillReply:
    first_token: int
    # None when the first token already ended the sequence (nothing to decode; the
    # prefill worker has freed the KV).
    kv: RemoteKvHandle | None
    finish_reason: FinishReason | None
    prefill_seconds: float


@dataclass(frozen=True, slots=True)
class DecodeChunk:
    token_ids: tuple[int, ...]
    finish_reason: FinishReason | None = None  # set on the last chunk only
    # Set on the first chunk only:
    prompt_tokens: int = 0
    prefilled_locally: bool = False
    kv_bytes_transferred: int = 0
    kv_transfer_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class HealthInfo:
    status: HealthStatus
    worker_id: str
    incarnation: str
    role: Role
    config_digest: str = ""  # model + KV layout; KV moves only between equal digests
    # tandem.tokenization.selection.fingerprint of the worker's tokenizer ("" unknown).
    tokenizer_fingerprint: str = ""


@dataclass(frozen=True, slots=True)
class WorkerStats:
    queued_requests: int
    queued_prefill_tokens: int
    active_sequences: int
    kv_blocks_total: int
    kv_blocks_free: int
    kv_block_size: int
    held_for_transfer: int
    # Measured since start (0.0, or no entry: not yet): seconds to compute one prompt
    # token, and to onboard one from each offload tier (``EngineStats`` and
    # ``OffloadStats``); what the router weighs a tier's cached tokens by.
    prefill_seconds_per_token: float = 0.0
    onboard_seconds_per_token: Mapping[Tier, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AgentInfo:
    """A worker's KV agent: what a decode worker needs to pull from it."""

    worker_id: str
    incarnation: str
    backend: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class KvClaim:
    """A prefill worker's answer to a claim: whether the KV may be read, and for how
    long (counted by the reader from before it sent the claim)."""

    claimed: bool
    read_s: float = 0.0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class KvEventBatch:
    """One message of a worker's KV event stream (see ``worker.proto``)."""

    worker_id: str
    incarnation: str
    block_size: int
    snapshot: bool  # the whole cache: replaces what the subscriber had
    sequence: int
    events: tuple[KvCacheEvent, ...]
