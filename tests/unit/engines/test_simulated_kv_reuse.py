"""The simulated engine's KV reuse and offload tiers: the pure bookkeeping (``kv_reuse``:
eviction order, tier capacities, what a prompt reuses, the events), onboarding priced
from the profile's host and disk links, and the engine computing only what it missed."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tandem.api.v1alpha1 import AcceleratorProfile
from tandem.capacity.kv import kv_bytes_per_gpu
from tandem.capacity.models import KvDtype, find_architecture
from tandem.engines.base import SamplingParams
from tandem.engines.simulated.config import SimulatedConfigError
from tandem.engines.simulated.engine import SimulatedEngine
from tandem.engines.simulated.kv_reuse import KvReuse, PrefixHit
from tandem.kv.block_hashes import BlockName, compute_block_names
from tandem.kv.events import BlocksRemoved, BlocksStored, KvCacheEvent, Tier
from tandem.perf.hardware import performance_for
from tandem.perf.model import Chunk, PerfModel, compute_onboard_seconds

BLOCK = 4


def prompt(first: int, blocks: int) -> list[BlockName]:
    """``blocks`` full blocks of distinct tokens starting at ``first``."""
    return compute_block_names(list(range(first, first + blocks * BLOCK)), BLOCK)


def tiers_of(events: Sequence[KvCacheEvent], kind: type) -> list[tuple[int, Tier]]:
    """(block_hash, tier) of each block the events of ``kind`` name, in order."""
    out: list[tuple[int, Tier]] = []
    for event in events:
        if isinstance(event, BlocksStored) and kind is BlocksStored:
            out += [(b.block_hash, event.tier) for b in event.blocks]
        elif isinstance(event, BlocksRemoved) and kind is BlocksRemoved:
            out += [(h, event.tier) for h in event.block_hashes]
    return out


def released(reuse: KvReuse, *names: Sequence[BlockName]) -> None:
    """Each prompt computed by a sequence that then ends, in order."""
    for blocks in names:
        reuse.hold(blocks, 0)
        reuse.release(blocks)


def test_a_computed_prompt_is_stored_on_the_device_once_as_one_chained_event() -> None:
    reuse = KvReuse({})
    a = prompt(0, 3)
    reuse.hold(a, 0)
    reuse.hold(a, 0)  # a second sequence with the same prompt: nothing new
    assert reuse.drain_events() == [BlocksStored(None, tuple(a), Tier.DEVICE)]
    reuse.release(a)
    assert reuse.cached == 0  # the other sequence still holds them
    reuse.release(a)
    assert reuse.cached == 3


def test_eviction_takes_the_least_recently_released_tail_first_into_host() -> None:
    reuse = KvReuse({Tier.HOST: 10})
    a, b = prompt(0, 2), prompt(100, 2)
    released(reuse, a, b)
    reuse.drain_events()
    reuse.evict(free_blocks=1)
    events = reuse.drain_events()
    order = [a[1], a[0], b[1]]  # a before b; each prompt's tail before its head
    assert tiers_of(events, BlocksRemoved) == [(n.block_hash, Tier.DEVICE) for n in order]
    assert tiers_of(events, BlocksStored) == [(n.block_hash, Tier.HOST) for n in order]
    # A block stored in a tier names its parent, so routers can chain it.
    assert BlocksStored(a[0].block_hash, (a[1],), Tier.HOST) in events
    assert reuse.cached == 1


def test_full_tiers_pass_their_oldest_block_down_and_the_lowest_drops_it() -> None:
    reuse = KvReuse({Tier.HOST: 1, Tier.DISK: 1})
    a = prompt(0, 3)
    released(reuse, a)
    reuse.evict(free_blocks=0)  # a[2], then a[1], then a[0] leave the device
    stats = reuse.stats()
    assert stats.blocks == {Tier.HOST: 1, Tier.DISK: 1}
    assert stats.dropped == {Tier.DISK: 1}
    hit = reuse.acquire(a)
    # a[0] (the newest) is in host memory, a[1] on disk, a[2] is gone.
    assert hit == PrefixHit(0, {Tier.HOST: 1, Tier.DISK: 1})


def test_without_tiers_evicted_blocks_are_gone() -> None:
    reuse = KvReuse({})
    a = prompt(0, 2)
    released(reuse, a)
    reuse.drain_events()
    reuse.evict(free_blocks=0)
    assert tiers_of(reuse.drain_events(), BlocksStored) == []
    assert reuse.acquire(a) == PrefixHit(0, {})


def test_a_prompt_reuses_its_device_prefix_then_onboards_what_the_tiers_hold() -> None:
    reuse = KvReuse({Tier.HOST: 4})
    a = prompt(0, 4)
    released(reuse, a)
    reuse.evict(free_blocks=2)  # the tail a[3], a[2] go to host; a[0], a[1] stay cached
    reuse.drain_events()
    longer = a + compute_block_names(list(range(500, 500 + BLOCK)), BLOCK, a[-1].block_hash)
    hit = reuse.acquire(longer)
    assert hit == PrefixHit(2, {Tier.HOST: 2})
    assert hit.blocks == 4
    events = reuse.drain_events()
    assert tiers_of(events, BlocksRemoved) == [(n.block_hash, Tier.HOST) for n in a[2:]]
    assert events[-1] == BlocksStored(a[1].block_hash, tuple(a[2:]), Tier.DEVICE)
    assert reuse.cached == 0  # all held by the new sequence
    assert reuse.stats().onboarded == {Tier.HOST: 2}


def test_a_hit_stops_at_the_first_block_no_tier_holds() -> None:
    reuse = KvReuse({Tier.HOST: 4})
    a = prompt(0, 3)
    released(reuse, a)
    reuse.evict(free_blocks=0)
    other = compute_block_names(list(range(900, 900 + BLOCK)), BLOCK)
    assert reuse.acquire([other[0], *a[1:]]) == PrefixHit(0, {})


# -- onboarding priced from the profile's links -------------------------------------------


def perf(profile: AcceleratorProfile, tp: int = 1) -> PerfModel:
    model = find_architecture("gpt-oss-120b")
    assert model is not None
    return PerfModel(model, performance_for(profile), tp, KvDtype.FP8)


@pytest.mark.parametrize("profile", [AcceleratorProfile.GB200, AcceleratorProfile.H100])
def test_onboarding_costs_the_kv_bytes_over_the_tier_link(profile: AcceleratorProfile) -> None:
    model = perf(profile)
    gpu = performance_for(profile)
    tokens = 16_384
    shard = kv_bytes_per_gpu(model.model, tokens, dtype=model.kv_dtype, tensor_parallel_size=1)
    for tier, link in ((Tier.HOST, gpu.host_link), (Tier.DISK, gpu.disk_link)):
        expected = link.latency_s + shard / link.effective_bytes_per_second
        assert compute_onboard_seconds(model, {tier: tokens}) == pytest.approx(expected)
    both = compute_onboard_seconds(model, {Tier.HOST: tokens, Tier.DISK: tokens})
    assert both == pytest.approx(
        compute_onboard_seconds(model, {Tier.HOST: tokens})
        + compute_onboard_seconds(model, {Tier.DISK: tokens})
    )
    assert compute_onboard_seconds(model, {Tier.HOST: 0}) == 0.0


def test_gb200_onboards_from_host_faster_than_a_pcie_host() -> None:
    tokens = {Tier.HOST: 32_768}
    gb200 = compute_onboard_seconds(perf(AcceleratorProfile.GB200), tokens)
    b200 = compute_onboard_seconds(perf(AcceleratorProfile.B200), tokens)
    assert gb200 < b200


# -- the engine -------------------------------------------------------------------------

GIB = 1 << 30


def engine(**options: object) -> SimulatedEngine:
    return SimulatedEngine.from_options({"accelerator": "gb200", **options})


def prefill_seconds(
    e: SimulatedEngine, request_id: str, tokens: Sequence[int], max_tokens: int = 1
) -> float:
    """Prefill ``tokens`` alone and end the sequence: the modelled seconds it took."""
    e.start_prefill(request_id, tokens, SamplingParams(max_tokens=max_tokens))
    total = 0.0
    while True:
        outputs, seconds = e.advance({})
        total += seconds
        if any(o.prefill is not None for o in outputs):
            e.release(request_id)
            return total


PROMPT = list(range(1_000, 1_000 + 8_192))
PROMPT_NAMES = compute_block_names(PROMPT, 32)


def test_without_prefix_cache_every_prompt_is_computed_again() -> None:
    e = engine()
    prefill_seconds(e, "a", PROMPT)
    prefill_seconds(e, "b", PROMPT)
    assert e.stats().prompt_tokens_computed == 2 * len(PROMPT)
    assert e.drain_kv_events() == []


def test_a_cached_prefix_is_not_computed_again() -> None:
    e = engine(prefix_cache=True)
    first = prefill_seconds(e, "a", PROMPT)
    second = prefill_seconds(e, "b", PROMPT + [7] * 100)
    # The 8192-token prefix is 256 whole blocks: only the 100 new tokens are computed.
    stats = e.stats()
    assert (stats.prompt_tokens_cached, stats.prompt_tokens_computed) == (
        len(PROMPT),
        len(PROMPT) + 100,
    )
    assert second < first
    assert tiers_of(e.drain_kv_events(), BlocksStored)[0][1] is Tier.DEVICE


def test_an_offloaded_prefix_comes_back_for_its_onboarding_time() -> None:
    # A small pool (1% of the free memory), so that one long answer needs all of it.
    e = engine(prefix_cache=True, offload_host_bytes=64 * GIB, free_gpu_memory_fraction=0.01)
    computed = prefill_seconds(e, "a", PROMPT)
    pool_tokens = e.capacity.blocks * e.config.options.tokens_per_block
    # Another prompt whose answer may take the whole pool: admitting it evicts "a".
    other = prefill_seconds(e, "other", list(range(50_000, 50_000 + 4_096)), max_tokens=pool_tokens)
    moved = tiers_of(e.drain_kv_events(), BlocksStored)
    assert (PROMPT_NAMES[-1].block_hash, Tier.HOST) in moved
    onboarded = prefill_seconds(e, "b", PROMPT)
    # Only the last token is computed (it yields the first answer token); the rest is
    # copied back over NVLink-C2C, which the step pays for.
    stats = e.stats()
    assert (stats.prompt_tokens_onboarded, stats.prompt_tokens_computed) == (
        len(PROMPT) - 1,
        len(PROMPT) + 4_096 + 1,
    )
    host = compute_onboard_seconds(e.config.perf, {Tier.HOST: len(PROMPT)})
    last_token = e.config.clock.step_seconds([], [Chunk(len(PROMPT) - 1, 1)])
    assert onboarded == pytest.approx(host + last_token)
    assert onboarded < computed / 10
    offload = e.stats().offload
    assert offload is not None and offload.onboarded == {Tier.HOST: len(PROMPT) // 32}
    # What the worker reports to routers: the modelled onboarding and prefill times.
    assert offload.onboard_seconds == {Tier.HOST: pytest.approx(host)}
    assert stats.prefill_seconds == pytest.approx(computed + other + last_token)


def test_tier_capacities_hold_every_rank_shard_of_a_block() -> None:
    one, four = engine(), engine(tensor_parallel_size=4)
    per_block = {
        e: e.capacity.block_bytes * e.config.options.tensor_parallel_size for e in (one, four)
    }
    for e, block in per_block.items():
        capacity = e.config.offload_blocks(e.capacity)
        assert capacity == {Tier.HOST: 0, Tier.DISK: 0}
        sized = SimulatedEngine.from_options(
            {
                "accelerator": "gb200",
                "tensor_parallel_size": e.config.options.tensor_parallel_size,
                "prefix_cache": True,
                "offload_host_bytes": 100 * block + 1,
                "offload_disk_bytes": 7 * block,
            }
        )
        assert sized.config.offload_blocks(sized.capacity) == {Tier.HOST: 100, Tier.DISK: 7}


def test_offload_needs_the_prefix_cache() -> None:
    with pytest.raises(SimulatedConfigError, match="needs prefix_cache"):
        engine(offload_host_bytes=GIB)
