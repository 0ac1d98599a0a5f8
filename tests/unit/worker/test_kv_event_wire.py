"""KV events on the wire keep their tier; a message without one means the device pool
(a worker that predates tiers), one naming a tier this side does not know is refused."""

from __future__ import annotations

import pytest

from tandem.kv.block_hashes import BlockName
from tandem.kv.events import AllCleared, BlocksRemoved, BlocksStored, KvCacheEvent, Tier
from tandem.proto import worker_pb2 as pb
from tandem.worker.convert import kv_event_from_pb, kv_event_to_pb


@pytest.mark.parametrize("tier", list(Tier))
def test_events_round_trip_with_their_tier(tier: Tier) -> None:
    events: list[KvCacheEvent] = [
        BlocksStored(7, (BlockName(1, 11), BlockName(2, 12)), tier),
        BlocksStored(None, (BlockName(3, 13),), tier),
        BlocksRemoved((1, 2), tier),
        AllCleared(),
    ]
    assert [kv_event_from_pb(kv_event_to_pb(e)) for e in events] == events


def test_an_event_without_a_tier_is_about_the_device_pool() -> None:
    message = pb.KvEvent(removed=pb.KvBlocksRemoved(block_hashes=[5]))
    assert kv_event_from_pb(message) == BlocksRemoved((5,), Tier.DEVICE)


def test_an_unknown_tier_is_refused() -> None:
    removed = pb.KvBlocksRemoved(block_hashes=[5], tier=7)  # type: ignore[arg-type]
    message = pb.KvEvent(removed=removed)
    with pytest.raises(ValueError, match="unknown tier"):
        kv_event_from_pb(message)
