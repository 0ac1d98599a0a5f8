"""Tier movement and onboarding decisions (``tandem.kv.offload.tiers``) on small tiers:
pure functions, no bytes."""

from __future__ import annotations

from tandem.kv.offload.tiers import Move, Tier, TierIndex, plan_offload, plan_onboarding

HOST, DISK = Tier.HOST, Tier.DISK


def offload_all(index: TierIndex, hashes: list[int]) -> list[list[Move]]:
    plans = []
    for block_hash in hashes:
        plan = plan_offload(index, block_hash)
        for move in plan:
            index.apply(move)
        plans.append(plan)
    return plans


def test_evicted_blocks_fill_host_then_move_down_to_disk_then_drop_oldest_first() -> None:
    index = TierIndex({HOST: 2, DISK: 2})
    plans = offload_all(index, [1, 2, 3, 4, 5])
    assert plans[:2] == [[Move(1, None, HOST)], [Move(2, None, HOST)]]
    # Bottom first, so that every move finds room.
    assert plans[2] == [Move(1, HOST, DISK), Move(3, None, HOST)]
    assert plans[4] == [Move(1, DISK, None), Move(3, HOST, DISK), Move(5, None, HOST)]
    assert [index.where(h) for h in range(1, 6)] == [None, DISK, DISK, HOST, HOST]


def test_without_a_host_tier_blocks_go_straight_to_disk() -> None:
    index = TierIndex({HOST: 0, DISK: 1})
    assert offload_all(index, [1, 2]) == [
        [Move(1, None, DISK)],
        [Move(1, DISK, None), Move(2, None, DISK)],
    ]


def test_a_stale_copy_is_dropped_before_the_fresh_one_enters() -> None:
    index = TierIndex({HOST: 1, DISK: 2})
    offload_all(index, [1, 2])  # 1 on disk, 2 in host
    assert plan_offload(index, 1) == [
        Move(1, DISK, None),
        Move(2, HOST, DISK),
        Move(1, None, HOST),
    ]


def test_a_disabled_tier_is_skipped_and_what_it_held_is_dropped() -> None:
    index = TierIndex({HOST: 1, DISK: 4})
    offload_all(index, [1, 2, 3])
    assert index.disable(DISK) == [Move(1, DISK, None), Move(2, DISK, None)]
    assert index.where(1) is None and index.count(DISK) == 0
    assert plan_offload(index, 4) == [Move(3, HOST, None), Move(4, None, HOST)]
    index = TierIndex({HOST: 0, DISK: 1})
    index.disable(DISK)
    assert plan_offload(index, 9) == []  # nowhere to keep it


def test_onboarding_takes_the_leading_run_the_tiers_hold_up_to_a_limit() -> None:
    index = TierIndex({HOST: 2, DISK: 2})
    offload_all(index, [10, 11, 12, 14])  # 10, 11 on disk; 12, 14 in host
    assert plan_onboarding(index, [10, 11, 12, 13, 14], limit=10) == [
        Move(10, DISK, None),
        Move(11, DISK, None),
        Move(12, HOST, None),
    ]
    assert plan_onboarding(index, [10, 11, 12], limit=2) == [
        Move(10, DISK, None),
        Move(11, DISK, None),
    ]
    assert plan_onboarding(index, [13, 14], limit=10) == []


def test_a_claimed_block_keeps_its_place_until_it_settles() -> None:
    index = TierIndex({HOST: 2, DISK: 1})
    offload_all(index, [1, 2])  # both in host, full
    assert index.claim(1) is HOST
    assert index.where(1) is None and index.count(HOST) == 1
    # Its place still counts: the next block pushes the oldest held one down instead of
    # taking the place being read.
    assert plan_offload(index, 3) == [Move(2, HOST, DISK), Move(3, None, HOST)]
    offload_all(index, [3])
    index.settle(HOST)
    assert index.capacity(HOST) == 2
    assert plan_offload(index, 4) == [Move(4, None, HOST)]


def test_a_tier_whose_every_place_is_claimed_is_passed_over() -> None:
    index = TierIndex({HOST: 1, DISK: 1})
    offload_all(index, [1])
    index.claim(1)
    assert index.enabled() == [DISK]
    assert plan_offload(index, 2) == [Move(2, None, DISK)]


def test_a_restored_block_is_held_again_and_a_disabled_tier_stays_disabled() -> None:
    index = TierIndex({HOST: 1, DISK: 2})
    offload_all(index, [1, 2])  # 1 on disk, 2 in host
    tier = index.claim(1)
    index.restore(1, tier)
    assert index.where(1) is DISK and index.capacity(DISK) == 2
    index.claim(2)
    index.disable(HOST)
    index.settle(HOST)
    assert index.capacity(HOST) == 0 and index.enabled() == [DISK]
