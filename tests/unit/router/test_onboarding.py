"""Scoring a worker by the prompt tokens it would not compute, each tier's tokens
weighted by what onboarding them costs, against its load (hand-worked figures)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from tandem.kv.events import Tier
from tandem.router.onboarding import (
    DEFAULT_TIER_WEIGHTS,
    measured_tier_weights,
    onboarding_weight,
    saved_tokens,
)
from tandem.router.policy import (
    PolicyConfig,
    RouteRequest,
    WorkerRole,
    WorkerSnapshot,
    choose_decode_worker,
)

# A full 1000-token prefix hit is worth overlap_weight (2) active sequences; a host token
# 3/4 of a device token, a disk token half: a whole prompt in host costs 0.5 sequences
# more than on device, on disk 1, held nowhere 2.
WEIGHTS = {Tier.DEVICE: 1.0, Tier.HOST: 0.75, Tier.DISK: 0.5}
CONFIG = PolicyConfig(tier_weights=WEIGHTS)
REQUEST = RouteRequest(prompt_tokens=1000, max_tokens=10)


def worker(key: str, active: int = 0) -> WorkerSnapshot:
    return WorkerSnapshot(key, WorkerRole.DECODE, active_sequences=active)


def chosen(held: Mapping[str, Mapping[Tier, int]], *workers: WorkerSnapshot) -> str:
    cached = {key: saved_tokens(tiers, CONFIG.tier_weights) for key, tiers in held.items()}
    best = choose_decode_worker(workers, REQUEST, cached, CONFIG)
    assert best is not None
    return best.key


def test_onboarding_weight_is_the_share_of_prefill_time_saved() -> None:
    # 1000 bytes a token at 1 MB/s: 1 ms to onboard; 100 tokens/s: 10 ms to compute.
    assert onboarding_weight(1000, 1e6, 100) == pytest.approx(0.9)
    # Computing at 2000 tokens/s (0.5 ms) beats onboarding: the tier saves nothing.
    assert onboarding_weight(1000, 1e6, 2000) == 0.0


def test_saved_tokens_weighs_each_tier() -> None:
    held = {Tier.DEVICE: 64, Tier.HOST: 32, Tier.DISK: 32}
    assert saved_tokens(held, WEIGHTS) == 64 + 24 + 16
    assert saved_tokens(held, {Tier.DEVICE: 1.0}) == 64  # an unweighted tier saves nothing


def test_default_weights_rank_the_tiers() -> None:
    weights = DEFAULT_TIER_WEIGHTS
    assert weights[Tier.DEVICE] == 1.0 > weights[Tier.HOST] > weights[Tier.DISK] > 0.0


def test_a_prefix_on_disk_beats_none_and_loses_to_one_on_device_at_equal_load() -> None:
    assert chosen({"disk": {Tier.DISK: 1000}}, worker("disk"), worker("none")) == "disk"
    device_or_disk = {"disk": {Tier.DISK: 1000}, "device": {Tier.DEVICE: 1000}}
    assert chosen(device_or_disk, worker("disk"), worker("device")) == "device"
    host_or_disk = {"disk": {Tier.DISK: 1000}, "host": {Tier.HOST: 1000}}
    assert chosen(host_or_disk, worker("disk"), worker("host")) == "host"


def test_a_prefix_split_across_tiers_counts_each_part() -> None:
    # 600 on device + 400 on disk saves 800 tokens (cost 0.4); 1000 in host 750 (0.5)...
    split = {Tier.DEVICE: 600, Tier.DISK: 400}
    held = {"split": split, "host": {Tier.HOST: 1000}}
    assert chosen(held, worker("split"), worker("host")) == "split"
    # ...and 700 on device + 300 in host saves 925 (cost 0.15).
    held = {"split": split, "mixed": {Tier.DEVICE: 700, Tier.HOST: 300}}
    assert chosen(held, worker("split"), worker("mixed")) == "mixed"


def test_load_weighs_against_a_lower_tier() -> None:
    # Host prefix with one more sequence: 1 + 0.5 = 1.5 < nothing held at 0 load: 2.
    assert chosen({"host": {Tier.HOST: 1000}}, worker("host", 1), worker("none")) == "host"
    # Disk prefix with two more sequences: 2 + 1 = 3 > 2.
    assert chosen({"disk": {Tier.DISK: 1000}}, worker("disk", 2), worker("none")) == "none"


def test_measured_weights_are_each_workers_own() -> None:
    # Prefill 1 ms a token; host 0.1 ms saves 0.9, disk 2 ms saves nothing.
    costs = {Tier.HOST: 1e-4, Tier.DISK: 2e-3}
    weights = measured_tier_weights(1e-3, costs, WEIGHTS)
    assert weights[Tier.HOST] == pytest.approx(0.9)
    assert weights[Tier.DISK] == 0.0
    assert weights[Tier.DEVICE] == 1.0
    # A tier it has not onboarded from keeps its default...
    assert measured_tier_weights(1e-3, {Tier.HOST: 1e-4}, WEIGHTS)[Tier.DISK] == 0.5
    # ...and so does every tier before it has computed a prompt token.
    assert measured_tier_weights(0.0, costs, WEIGHTS) == WEIGHTS


def test_a_worker_whose_disk_is_slower_than_computing_loses_its_disk_prefix() -> None:
    # Both hold the prompt on disk. "slow" measured its disk at 2 ms a token against
    # 1 ms to compute one (a GPU's prefill): worth nothing, so its prefix does not
    # outweigh one more sequence on "fast", whose disk saves 0.9 of a token.
    slow = measured_tier_weights(1e-3, {Tier.DISK: 2e-3}, WEIGHTS)
    fast = measured_tier_weights(1e-3, {Tier.DISK: 1e-4}, WEIGHTS)
    cached = {
        "slow": saved_tokens({Tier.DISK: 1000}, slow),
        "fast": saved_tokens({Tier.DISK: 1000}, fast),
    }
    assert cached == {"slow": 0, "fast": 900}
    best = choose_decode_worker([worker("slow"), worker("fast", 1)], REQUEST, cached, CONFIG)
    assert best is not None and best.key == "fast"
    # Weighed by the defaults instead, the idle worker's disk prefix wins.
    assert (
        chosen(
            {"slow": {Tier.DISK: 1000}, "fast": {Tier.DISK: 1000}},
            worker("slow"),
            worker("fast", 1),
        )
        == "slow"
    )
