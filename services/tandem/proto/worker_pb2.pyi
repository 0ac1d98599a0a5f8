from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class KvTier(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KV_TIER_DEVICE: _ClassVar[KvTier]
    KV_TIER_HOST: _ClassVar[KvTier]
    KV_TIER_DISK: _ClassVar[KvTier]
KV_TIER_DEVICE: KvTier
KV_TIER_HOST: KvTier
KV_TIER_DISK: KvTier

class Sampling(_message.Message):
    __slots__ = ("max_tokens", "temperature", "top_p", "seed", "stop_token_ids", "priority")
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    max_tokens: int
    temperature: float
    top_p: float
    seed: int
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    priority: int
    def __init__(self, max_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., seed: _Optional[int] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., priority: _Optional[int] = ...) -> None: ...

class KvRange(_message.Message):
    __slots__ = ("region", "offset", "length")
    REGION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    region: int
    offset: int
    length: int
    def __init__(self, region: _Optional[int] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class RemoteKv(_message.Message):
    __slots__ = ("worker_id", "incarnation", "grpc_address", "backend", "num_tokens", "ranges", "opaque", "config_digest")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RANGES_FIELD_NUMBER: _ClassVar[int]
    OPAQUE_FIELD_NUMBER: _ClassVar[int]
    CONFIG_DIGEST_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    incarnation: str
    grpc_address: str
    backend: str
    num_tokens: int
    ranges: _containers.RepeatedCompositeFieldContainer[KvRange]
    opaque: bytes
    config_digest: str
    def __init__(self, worker_id: _Optional[str] = ..., incarnation: _Optional[str] = ..., grpc_address: _Optional[str] = ..., backend: _Optional[str] = ..., num_tokens: _Optional[int] = ..., ranges: _Optional[_Iterable[_Union[KvRange, _Mapping]]] = ..., opaque: _Optional[bytes] = ..., config_digest: _Optional[str] = ...) -> None: ...

class PrefillRequest(_message.Message):
    __slots__ = ("request_id", "prompt_token_ids", "sampling")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    sampling: Sampling
    def __init__(self, request_id: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., sampling: _Optional[_Union[Sampling, _Mapping]] = ...) -> None: ...

class PrefillResponse(_message.Message):
    __slots__ = ("first_token_id", "kv", "finish_reason", "prefill_seconds")
    FIRST_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    KV_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    PREFILL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    first_token_id: int
    kv: RemoteKv
    finish_reason: str
    prefill_seconds: float
    def __init__(self, first_token_id: _Optional[int] = ..., kv: _Optional[_Union[RemoteKv, _Mapping]] = ..., finish_reason: _Optional[str] = ..., prefill_seconds: _Optional[float] = ...) -> None: ...

class DecodeRequest(_message.Message):
    __slots__ = ("request_id", "prompt_token_ids", "sampling", "remote_kv", "first_token_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    REMOTE_KV_FIELD_NUMBER: _ClassVar[int]
    FIRST_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    sampling: Sampling
    remote_kv: RemoteKv
    first_token_id: int
    def __init__(self, request_id: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., sampling: _Optional[_Union[Sampling, _Mapping]] = ..., remote_kv: _Optional[_Union[RemoteKv, _Mapping]] = ..., first_token_id: _Optional[int] = ...) -> None: ...

class DecodeChunk(_message.Message):
    __slots__ = ("token_ids", "finish_reason", "prompt_tokens", "prefilled_locally", "kv_bytes_transferred", "kv_transfer_seconds")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREFILLED_LOCALLY_FIELD_NUMBER: _ClassVar[int]
    KV_BYTES_TRANSFERRED_FIELD_NUMBER: _ClassVar[int]
    KV_TRANSFER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    finish_reason: str
    prompt_tokens: int
    prefilled_locally: bool
    kv_bytes_transferred: int
    kv_transfer_seconds: float
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., finish_reason: _Optional[str] = ..., prompt_tokens: _Optional[int] = ..., prefilled_locally: _Optional[bool] = ..., kv_bytes_transferred: _Optional[int] = ..., kv_transfer_seconds: _Optional[float] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("request_id", "claimer")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CLAIMER_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    claimer: str
    def __init__(self, request_id: _Optional[str] = ..., claimer: _Optional[str] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("released",)
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: bool
    def __init__(self, released: _Optional[bool] = ...) -> None: ...

class ClaimKvRequest(_message.Message):
    __slots__ = ("request_id", "incarnation", "claimer", "read_seconds")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    CLAIMER_FIELD_NUMBER: _ClassVar[int]
    READ_SECONDS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    incarnation: str
    claimer: str
    read_seconds: float
    def __init__(self, request_id: _Optional[str] = ..., incarnation: _Optional[str] = ..., claimer: _Optional[str] = ..., read_seconds: _Optional[float] = ...) -> None: ...

class ClaimKvResponse(_message.Message):
    __slots__ = ("claimed", "read_seconds", "reason")
    CLAIMED_FIELD_NUMBER: _ClassVar[int]
    READ_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    claimed: bool
    read_seconds: float
    reason: str
    def __init__(self, claimed: _Optional[bool] = ..., read_seconds: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HealthResponse(_message.Message):
    __slots__ = ("status", "worker_id", "incarnation", "role", "config_digest", "tokenizer_fingerprint")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNKNOWN: _ClassVar[HealthResponse.Status]
        SERVING: _ClassVar[HealthResponse.Status]
        DRAINING: _ClassVar[HealthResponse.Status]
        NOT_SERVING: _ClassVar[HealthResponse.Status]
    UNKNOWN: HealthResponse.Status
    SERVING: HealthResponse.Status
    DRAINING: HealthResponse.Status
    NOT_SERVING: HealthResponse.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONFIG_DIGEST_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    status: HealthResponse.Status
    worker_id: str
    incarnation: str
    role: str
    config_digest: str
    tokenizer_fingerprint: str
    def __init__(self, status: _Optional[_Union[HealthResponse.Status, str]] = ..., worker_id: _Optional[str] = ..., incarnation: _Optional[str] = ..., role: _Optional[str] = ..., config_digest: _Optional[str] = ..., tokenizer_fingerprint: _Optional[str] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("queued_requests", "queued_prefill_tokens", "active_sequences", "kv_blocks_total", "kv_blocks_free", "kv_block_size", "held_for_transfer", "prefill_seconds_per_token", "onboard_costs")
    QUEUED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_PREFILL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_FREE_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    HELD_FOR_TRANSFER_FIELD_NUMBER: _ClassVar[int]
    PREFILL_SECONDS_PER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ONBOARD_COSTS_FIELD_NUMBER: _ClassVar[int]
    queued_requests: int
    queued_prefill_tokens: int
    active_sequences: int
    kv_blocks_total: int
    kv_blocks_free: int
    kv_block_size: int
    held_for_transfer: int
    prefill_seconds_per_token: float
    onboard_costs: _containers.RepeatedCompositeFieldContainer[TierCost]
    def __init__(self, queued_requests: _Optional[int] = ..., queued_prefill_tokens: _Optional[int] = ..., active_sequences: _Optional[int] = ..., kv_blocks_total: _Optional[int] = ..., kv_blocks_free: _Optional[int] = ..., kv_block_size: _Optional[int] = ..., held_for_transfer: _Optional[int] = ..., prefill_seconds_per_token: _Optional[float] = ..., onboard_costs: _Optional[_Iterable[_Union[TierCost, _Mapping]]] = ...) -> None: ...

class TierCost(_message.Message):
    __slots__ = ("tier", "seconds_per_token")
    TIER_FIELD_NUMBER: _ClassVar[int]
    SECONDS_PER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tier: KvTier
    seconds_per_token: float
    def __init__(self, tier: _Optional[_Union[KvTier, str]] = ..., seconds_per_token: _Optional[float] = ...) -> None: ...

class KvAgentRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class KvAgentResponse(_message.Message):
    __slots__ = ("worker_id", "incarnation", "backend", "metadata")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    incarnation: str
    backend: str
    metadata: bytes
    def __init__(self, worker_id: _Optional[str] = ..., incarnation: _Optional[str] = ..., backend: _Optional[str] = ..., metadata: _Optional[bytes] = ...) -> None: ...

class KvBlock(_message.Message):
    __slots__ = ("block_hash", "tokens_hash")
    BLOCK_HASH_FIELD_NUMBER: _ClassVar[int]
    TOKENS_HASH_FIELD_NUMBER: _ClassVar[int]
    block_hash: int
    tokens_hash: int
    def __init__(self, block_hash: _Optional[int] = ..., tokens_hash: _Optional[int] = ...) -> None: ...

class KvBlocksStored(_message.Message):
    __slots__ = ("parent_hash", "blocks", "tier")
    PARENT_HASH_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    parent_hash: int
    blocks: _containers.RepeatedCompositeFieldContainer[KvBlock]
    tier: KvTier
    def __init__(self, parent_hash: _Optional[int] = ..., blocks: _Optional[_Iterable[_Union[KvBlock, _Mapping]]] = ..., tier: _Optional[_Union[KvTier, str]] = ...) -> None: ...

class KvBlocksRemoved(_message.Message):
    __slots__ = ("block_hashes", "tier")
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    tier: KvTier
    def __init__(self, block_hashes: _Optional[_Iterable[int]] = ..., tier: _Optional[_Union[KvTier, str]] = ...) -> None: ...

class KvAllCleared(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class KvEvent(_message.Message):
    __slots__ = ("stored", "removed", "cleared")
    STORED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    CLEARED_FIELD_NUMBER: _ClassVar[int]
    stored: KvBlocksStored
    removed: KvBlocksRemoved
    cleared: KvAllCleared
    def __init__(self, stored: _Optional[_Union[KvBlocksStored, _Mapping]] = ..., removed: _Optional[_Union[KvBlocksRemoved, _Mapping]] = ..., cleared: _Optional[_Union[KvAllCleared, _Mapping]] = ...) -> None: ...

class KvEventsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class KvEventBatch(_message.Message):
    __slots__ = ("worker_id", "incarnation", "block_size", "snapshot", "sequence", "events")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    incarnation: str
    block_size: int
    snapshot: bool
    sequence: int
    events: _containers.RepeatedCompositeFieldContainer[KvEvent]
    def __init__(self, worker_id: _Optional[str] = ..., incarnation: _Optional[str] = ..., block_size: _Optional[int] = ..., snapshot: _Optional[bool] = ..., sequence: _Optional[int] = ..., events: _Optional[_Iterable[_Union[KvEvent, _Mapping]]] = ...) -> None: ...

class DrainRequest(_message.Message):
    __slots__ = ("grace_seconds",)
    GRACE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    grace_seconds: float
    def __init__(self, grace_seconds: _Optional[float] = ...) -> None: ...

class DrainResponse(_message.Message):
    __slots__ = ("in_flight",)
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    in_flight: int
    def __init__(self, in_flight: _Optional[int] = ...) -> None: ...
