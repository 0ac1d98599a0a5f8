"""Proto messages <-> worker domain types. No logic beyond field mapping."""

from __future__ import annotations

from tandem.engines.base import FinishReason, KvRange, SamplingParams
from tandem.kv.block_hashes import BlockName
from tandem.kv.events import AllCleared, BlocksRemoved, BlocksStored, KvCacheEvent, Tier
from tandem.proto import worker_pb2 as pb
from tandem.worker.types import (
    AgentInfo,
    DecodeChunk,
    HealthInfo,
    HealthStatus,
    KvClaim,
    KvEventBatch,
    PrefillReply,
    RemoteKvHandle,
    Role,
    WorkerStats,
)

_HEALTH_TO_PB = {
    HealthStatus.SERVING: pb.HealthResponse.SERVING,
    HealthStatus.DRAINING: pb.HealthResponse.DRAINING,
    HealthStatus.NOT_SERVING: pb.HealthResponse.NOT_SERVING,
}
_HEALTH_FROM_PB = {v: k for k, v in _HEALTH_TO_PB.items()}


def sampling_to_pb(sampling: SamplingParams) -> pb.Sampling:
    return pb.Sampling(
        max_tokens=sampling.max_tokens,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        seed=sampling.seed,
        stop_token_ids=sampling.stop_token_ids,
        priority=sampling.priority,
    )


def sampling_from_pb(message: pb.Sampling) -> SamplingParams:
    return SamplingParams(
        max_tokens=message.max_tokens,
        temperature=message.temperature,
        top_p=message.top_p,
        seed=message.seed if message.HasField("seed") else None,
        stop_token_ids=tuple(message.stop_token_ids),
        priority=message.priority,
    )


def finish_to_pb(reason: FinishReason | None) -> str:
    return "" if reason is None else reason.value


def finish_from_pb(value: str) -> FinishReason | None:
    return FinishReason(value) if value else None


def remote_kv_to_pb(kv: RemoteKvHandle) -> pb.RemoteKv:
    return pb.RemoteKv(
        worker_id=kv.worker_id,
        incarnation=kv.incarnation,
        grpc_address=kv.grpc_address,
        backend=kv.backend,
        num_tokens=kv.num_tokens,
        ranges=[pb.KvRange(region=r.region, offset=r.offset, length=r.length) for r in kv.ranges],
        opaque=kv.opaque,
        config_digest=kv.config_digest,
    )


def remote_kv_from_pb(message: pb.RemoteKv) -> RemoteKvHandle:
    return RemoteKvHandle(
        worker_id=message.worker_id,
        incarnation=message.incarnation,
        grpc_address=message.grpc_address,
        backend=message.backend,
        num_tokens=message.num_tokens,
        ranges=tuple(KvRange(r.region, r.offset, r.length) for r in message.ranges),
        opaque=message.opaque,
        config_digest=message.config_digest,
    )


def prefill_reply_to_pb(reply: PrefillReply) -> pb.PrefillResponse:
    response = pb.PrefillResponse(
        first_token_id=reply.first_token,
        finish_reason=finish_to_pb(reply.finish_reason),
        prefill_seconds=reply.prefill_seconds,
    )
    if reply.kv is not None:
        response.kv.CopyFrom(remote_kv_to_pb(reply.kv))
    return response


def prefill_reply_from_pb(message: pb.PrefillResponse) -> PrefillReply:
    return PrefillReply(
        first_token=message.first_token_id,
        kv=remote_kv_from_pb(message.kv) if message.HasField("kv") else None,
        finish_reason=finish_from_pb(message.finish_reason),
        prefill_seconds=message.prefill_seconds,
    )


def chunk_to_pb(chunk: DecodeChunk) -> pb.DecodeChunk:
    return pb.DecodeChunk(
        token_ids=chunk.token_ids,
        finish_reason=finish_to_pb(chunk.finish_reason),
        prompt_tokens=chunk.prompt_tokens,
        prefilled_locally=chunk.prefilled_locally,
        kv_bytes_transferred=chunk.kv_bytes_transferred,
        kv_transfer_seconds=chunk.kv_transfer_seconds,
    )


def chunk_from_pb(message: pb.DecodeChunk) -> DecodeChunk:
    return DecodeChunk(
        token_ids=tuple(message.token_ids),
        finish_reason=finish_from_pb(message.finish_reason),
        prompt_tokens=message.prompt_tokens,
        prefilled_locally=message.prefilled_locally,
        kv_bytes_transferred=message.kv_bytes_transferred,
        kv_transfer_seconds=message.kv_transfer_seconds,
    )


def health_to_pb(info: HealthInfo) -> pb.HealthResponse:
    return pb.HealthResponse(
        status=_HEALTH_TO_PB[info.status],
        worker_id=info.worker_id,
        incarnation=info.incarnation,
        role=info.role.value,
        config_digest=info.config_digest,
        tokenizer_fingerprint=info.tokenizer_fingerprint,
    )


def health_from_pb(message: pb.HealthResponse) -> HealthInfo:
    """Raises ValueError naming the field when the role is not one this version knows."""
    roles = {r.value for r in Role}
    if message.role not in roles:
        raise ValueError(f"role {message.role!r} is not one of {', '.join(sorted(roles))}")
    return HealthInfo(
        status=_HEALTH_FROM_PB.get(message.status, HealthStatus.NOT_SERVING),
        worker_id=message.worker_id,
        incarnation=message.incarnation,
        role=Role(message.role),
        config_digest=message.config_digest,
        tokenizer_fingerprint=message.tokenizer_fingerprint,
    )


def stats_to_pb(stats: WorkerStats) -> pb.StatsResponse:
    return pb.StatsResponse(
        queued_requests=stats.queued_requests,
        queued_prefill_tokens=stats.queued_prefill_tokens,
        active_sequences=stats.active_sequences,
        kv_blocks_total=stats.kv_blocks_total,
        kv_blocks_free=stats.kv_blocks_free,
        kv_block_size=stats.kv_block_size,
        held_for_transfer=stats.held_for_transfer,
        prefill_seconds_per_token=stats.prefill_seconds_per_token,
        onboard_costs=[
            pb.TierCost(tier=_TIER_TO_PB[tier], seconds_per_token=seconds)
            for tier, seconds in stats.onboard_seconds_per_token.items()
        ],
    )


def stats_from_pb(message: pb.StatsResponse) -> WorkerStats:
    return WorkerStats(
        queued_requests=message.queued_requests,
        queued_prefill_tokens=message.queued_prefill_tokens,
        active_sequences=message.active_sequences,
        kv_blocks_total=message.kv_blocks_total,
        kv_blocks_free=message.kv_blocks_free,
        kv_block_size=message.kv_block_size,
        held_for_transfer=message.held_for_transfer,
        prefill_seconds_per_token=message.prefill_seconds_per_token,
        # A tier this version does not know is left out: its tokens then count for nothing.
        onboard_seconds_per_token={
            _TIER_FROM_PB[cost.tier]: cost.seconds_per_token
            for cost in message.onboard_costs
            if cost.tier in _TIER_FROM_PB
        },
    )


def agent_to_pb(info: AgentInfo) -> pb.KvAgentResponse:
    return pb.KvAgentResponse(
        worker_id=info.worker_id,
        incarnation=info.incarnation,
        backend=info.backend,
        metadata=info.metadata,
    )


def agent_from_pb(message: pb.KvAgentResponse) -> AgentInfo:
    return AgentInfo(
        worker_id=message.worker_id,
        incarnation=message.incarnation,
        backend=message.backend,
        metadata=message.metadata,
    )


def claim_to_pb(claim: KvClaim) -> pb.ClaimKvResponse:
    return pb.ClaimKvResponse(claimed=claim.claimed, read_seconds=claim.read_s, reason=claim.reason)


def claim_from_pb(message: pb.ClaimKvResponse) -> KvClaim:
    return KvClaim(message.claimed, message.read_seconds, message.reason)


_TIER_TO_PB = {
    Tier.DEVICE: pb.KV_TIER_DEVICE,
    Tier.HOST: pb.KV_TIER_HOST,
    Tier.DISK: pb.KV_TIER_DISK,
}
_TIER_FROM_PB: dict[int, Tier] = {number: tier for tier, number in _TIER_TO_PB.items()}


def _tier_from_pb(number: int) -> Tier:
    tier = _TIER_FROM_PB.get(number)
    if tier is None:  # a newer sender's tier: better unrouted than misread as device
        raise ValueError(f"KV event names an unknown tier ({number})")
    return tier


def kv_event_to_pb(event: KvCacheEvent) -> pb.KvEvent:
    if isinstance(event, BlocksStored):
        blocks = [
            pb.KvBlock(block_hash=b.block_hash, tokens_hash=b.tokens_hash) for b in event.blocks
        ]
        stored = pb.KvBlocksStored(blocks=blocks, tier=_TIER_TO_PB[event.tier])
        if event.parent_hash is not None:
            stored.parent_hash = event.parent_hash
        return pb.KvEvent(stored=stored)
    if isinstance(event, BlocksRemoved):
        removed = pb.KvBlocksRemoved(block_hashes=event.block_hashes, tier=_TIER_TO_PB[event.tier])
        return pb.KvEvent(removed=removed)
    return pb.KvEvent(cleared=pb.KvAllCleared())


def kv_event_from_pb(message: pb.KvEvent) -> KvCacheEvent:
    kind = message.WhichOneof("kind")
    if kind == "stored":
        stored = message.stored
        return BlocksStored(
            stored.parent_hash if stored.HasField("parent_hash") else None,
            tuple(BlockName(b.block_hash, b.tokens_hash) for b in stored.blocks),
            _tier_from_pb(stored.tier),
        )
    if kind == "removed":
        removed = message.removed
        return BlocksRemoved(tuple(removed.block_hashes), _tier_from_pb(removed.tier))
    if kind == "cleared":
        return AllCleared()
    raise ValueError("KV event names no kind (stored, removed or cleared)")


def kv_batch_to_pb(batch: KvEventBatch) -> pb.KvEventBatch:
    return pb.KvEventBatch(
        worker_id=batch.worker_id,
        incarnation=batch.incarnation,
        block_size=batch.block_size,
        snapshot=batch.snapshot,
        sequence=batch.sequence,
        events=[kv_event_to_pb(e) for e in batch.events],
    )


def kv_batch_from_pb(message: pb.KvEventBatch) -> KvEventBatch:
    """Raises ValueError on an event of no known kind."""
    return KvEventBatch(
        worker_id=message.worker_id,
        incarnation=message.incarnation,
        block_size=message.block_size,
        snapshot=message.snapshot,
        sequence=message.sequence,
        events=tuple(kv_event_from_pb(e) for e in message.events),
    )
