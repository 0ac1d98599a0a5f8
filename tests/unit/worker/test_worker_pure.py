"""Pure parts of the worker: admission, layout checks, proto conversion."""

from __future__ import annotations

import pytest

from tandem.engines.base import FinishReason, KvLayout, KvRange, SamplingParams
from tandem.kv.events import Tier
from tandem.proto import worker_pb2 as pb
from tandem.worker import convert
from tandem.worker.admission import AdmissionLimits, Load, check_admission
from tandem.worker.errors import KvLayoutMismatch
from tandem.worker.handoff import check_layouts_match
from tandem.worker.types import (
    AgentInfo,
    DecodeChunk,
    HealthInfo,
    HealthStatus,
    KvClaim,
    PrefillReply,
    RemoteKvHandle,
    Role,
    WorkerStats,
)

LIMITS = AdmissionLimits(max_queued_requests=4, max_queued_tokens=1000, max_active_sequences=10)


@pytest.mark.parametrize(
    ("load", "prompt", "decoding", "admitted"),
    [
        (Load(0, 0, 0), 10, False, True),
        (Load(3, 500, 0), 500, False, True),
        (Load(4, 0, 0), 1, False, False),  # queue full
        (Load(1, 900, 0), 200, False, False),  # token budget
        (Load(0, 0, 0), 5000, False, True),  # too big alone is still admitted when idle
        (Load(0, 0, 10), 10, True, False),  # decode slots full
        (Load(2, 0, 8), 10, True, False),  # starting ones count against decode slots
        (Load(0, 0, 10), 10, False, True),  # prefill-only work ignores decode slots
    ],
)
def test_admission(load: Load, prompt: int, decoding: bool, admitted: bool) -> None:
    refusal = check_admission(LIMITS, load, prompt, decoding=decoding)
    assert (refusal is None) == admitted


REMOTE = RemoteKvHandle(
    worker_id="p",
    incarnation="i",
    grpc_address="127.0.0.1:1",
    backend="tcp",
    num_tokens=20,
    ranges=(KvRange(0, 0, 100), KvRange(0, 4096, 60)),
    opaque=b"\x01",
    config_digest="0123abcd",
)


def test_matching_layouts_pass_and_mismatches_are_named() -> None:
    check_layouts_match(REMOTE, KvLayout(20, (KvRange(0, 800, 100), KvRange(0, 0, 60))), 20)
    with pytest.raises(KvLayoutMismatch, match="prompt has 21"):
        check_layouts_match(REMOTE, KvLayout(21, ()), 21)
    with pytest.raises(KvLayoutMismatch, match="2 ranges"):
        check_layouts_match(REMOTE, KvLayout(20, (KvRange(0, 0, 160),)), 20)
    with pytest.raises(KvLayoutMismatch, match="#1"):
        check_layouts_match(REMOTE, KvLayout(20, (KvRange(0, 0, 100), KvRange(0, 0, 61))), 20)


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(max_tokens=5),
        SamplingParams(max_tokens=7, temperature=0.5, top_p=0.75, seed=0, stop_token_ids=(1, 2)),
        SamplingParams(max_tokens=3, priority=1),
    ],
)
def test_sampling_round_trips(sampling: SamplingParams) -> None:
    assert convert.sampling_from_pb(convert.sampling_to_pb(sampling)) == sampling


def test_priority_crosses_the_wire_and_an_older_sender_means_default() -> None:
    wire = convert.sampling_to_pb(SamplingParams(max_tokens=3, priority=1)).SerializeToString()
    assert convert.sampling_from_pb(pb.Sampling.FromString(wire)).priority == 1
    older = pb.Sampling(max_tokens=3).SerializeToString()  # a router without the field
    assert convert.sampling_from_pb(pb.Sampling.FromString(older)).priority == 0


def test_a_tier_this_version_does_not_know_is_left_out_of_the_costs() -> None:
    message = convert.stats_to_pb(WorkerStats(1, 2, 3, 4, 5, 6, 7, 0.004, {Tier.HOST: 1e-4}))
    message.onboard_costs.add(tier=7, seconds_per_token=1e-5)  # a newer worker's tier
    assert convert.stats_from_pb(message).onboard_seconds_per_token == {Tier.HOST: 1e-4}


@pytest.mark.parametrize(
    "value",
    [
        REMOTE,
        PrefillReply(7, REMOTE, None, 0.25),
        PrefillReply(7, None, FinishReason.STOP, 0.5),
        DecodeChunk((1, 2), FinishReason.LENGTH, 20, True, 4096, 0.125),
        HealthInfo(HealthStatus.DRAINING, "w", "i", Role.BOTH),
        HealthInfo(HealthStatus.SERVING, "w", "i", Role.PREFILL, "0123abcd"),
        WorkerStats(1, 2, 3, 4, 5, 6, 7),
        WorkerStats(1, 2, 3, 4, 5, 6, 7, 0.004, {Tier.HOST: 0.0001, Tier.DISK: 0.002}),
        AgentInfo("w", "i", "nixl", b"\x00meta"),
        KvClaim(True, 12.5),
        KvClaim(False, 0.0, "gone"),
    ],
)
def test_domain_values_round_trip_through_proto(value: object) -> None:
    pairs = {
        RemoteKvHandle: (convert.remote_kv_to_pb, convert.remote_kv_from_pb),
        PrefillReply: (convert.prefill_reply_to_pb, convert.prefill_reply_from_pb),
        DecodeChunk: (convert.chunk_to_pb, convert.chunk_from_pb),
        HealthInfo: (convert.health_to_pb, convert.health_from_pb),
        WorkerStats: (convert.stats_to_pb, convert.stats_from_pb),
        AgentInfo: (convert.agent_to_pb, convert.agent_from_pb),
        KvClaim: (convert.claim_to_pb, convert.claim_from_pb),
    }
    to_pb, from_pb = pairs[type(value)]
    assert from_pb(to_pb(value)) == value  # type: ignore[operator]
