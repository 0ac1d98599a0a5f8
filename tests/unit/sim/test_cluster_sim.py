"""The virtual-time cluster against timelines worked out from the clock by hand: one
request alone, local and disaggregated, and two requests queueing for one prefill
worker."""

from __future__ import annotations

import pytest

from tandem.sim.cluster import ClusterSim, Deployment, SimRequest

OPTIONS = {"model": "gpt-oss-120b", "accelerator": "b200", "kv_cache_dtype": "fp8"}


def deployment(
    prefill: int, decode: int, min_prefill_tokens: int = 512, wait_s: float | None = None
) -> Deployment:
    return Deployment(prefill, decode, OPTIONS, OPTIONS, min_prefill_tokens, wait_s)


def clock():  # type: ignore[no-untyped-def]
    from tandem.engines.simulated import SimulatedEngine

    return SimulatedEngine.from_options(OPTIONS).config.clock


def test_one_local_request_is_its_prefill_then_one_step_per_token() -> None:
    c = clock()
    (outcome,) = ClusterSim(deployment(0, 1)).run_open([SimRequest(0.0, 10_000, 4)])
    # Chunks of 8192: 8192 then 1808 after 8192 cached; the first token comes with the
    # step that finishes the prompt.
    prefill = c.step_seconds([], [_chunk(0, 8192)]) + c.step_seconds([], [_chunk(8192, 1808)])
    assert outcome.ttft == pytest.approx(prefill)
    # Then 3 decode steps, at contexts 10000, 10001, 10002 (prompt + tokens before each).
    steps = [c.step_seconds([10_000 + i], []) for i in range(3)]
    assert outcome.end == pytest.approx(prefill + sum(steps))
    assert outcome.itl == pytest.approx(sum(steps) / 3)
    assert not outcome.remote and outcome.output_tokens == 4


def test_a_disaggregated_request_waits_for_its_kv() -> None:
    c = clock()
    (outcome,) = ClusterSim(deployment(1, 1)).run_open([SimRequest(0.0, 10_000, 4)])
    prefill = c.step_seconds([], [_chunk(0, 8192)]) + c.step_seconds([], [_chunk(8192, 1808)])
    transfer = c.kv_transfer_seconds(10_000)  # fp8 KV over one 400G rail
    assert outcome.remote
    assert outcome.ttft == pytest.approx(prefill + transfer)
    steps = [c.step_seconds([10_000 + i], []) for i in range(3)]
    assert outcome.end == pytest.approx(prefill + transfer + sum(steps))


def test_short_prompts_stay_local_and_prefills_queue_on_one_worker() -> None:
    sim = ClusterSim(deployment(1, 1, min_prefill_tokens=2048))
    outcomes = sim.run_open([SimRequest(0.0, 1000, 2), SimRequest(0.0, 4000, 2)])
    by_prompt = {o.ttft > 0 and o.remote: o for o in outcomes}
    assert set(by_prompt) == {False, True}  # 1000 tokens local, 4000 remote
    # Two long prompts at once on one prefill worker share its steps: both finish in
    # the one step that holds 2 x 4000 tokens (under the 8192 budget).
    c = clock()
    both = ClusterSim(deployment(1, 2)).run_open([SimRequest(0.0, 4000, 2)] * 2)
    step = c.step_seconds([], [_chunk(0, 4000), _chunk(0, 4000)])
    transfer = c.kv_transfer_seconds(4000)
    assert [o.ttft for o in both] == pytest.approx([step + transfer] * 2)


@pytest.mark.parametrize(("wait_in_prefills", "remote"), [(None, 4), (2.5, 3), (1.5, 3)])
def test_a_wait_limit_sends_what_would_queue_too_long_to_the_decode_worker(
    wait_in_prefills: float | None, remote: int
) -> None:
    c = clock()
    prefill = c.step_seconds([], [_chunk(0, 8192)]) + c.step_seconds([], [_chunk(8192, 1808)])
    wait_s = None if wait_in_prefills is None else wait_in_prefills * prefill
    # A first prompt alone measures the worker: 10,000 tokens in one prefill's time. At
    # t=10, three more at once would take 1, 2 and 3 prefills there (queue included).
    requests = [SimRequest(0.0, 10_000, 2)] + [SimRequest(10.0, 10_000, 2)] * 3
    outcomes = ClusterSim(deployment(1, 1, wait_s=wait_s)).run_open(requests)
    assert len(outcomes) == 4
    # No limit: 4 prompts' worth is under the token threshold, all go remote; 2.5
    # prefills: the third of the burst goes local; 1.5: the second does, and the third
    # queues on the prefill worker after all (decode_busy: the second's local prefill is
    # pending on that decode worker, and would stream the moment it ends).
    assert sum(o.remote for o in outcomes) == remote


def test_closed_loop_keeps_the_concurrency_and_sends_the_count() -> None:
    sim = ClusterSim(deployment(0, 1))
    # 500 tokens at ~2 ms each outlast the 1 s ramp: nothing finishes during it.
    outcomes = sim.run_closed(lambda i: SimRequest(0.0, 100, 500), 2, 5, ramp_s=1.0)
    assert len(outcomes) == 5
    arrivals = sorted(o.arrival for o in outcomes)
    assert arrivals[:2] == [0.0, 0.5]  # the ramp spreads the first two
    for o in outcomes:  # never more than two in flight
        assert sum(1 for q in outcomes if q.arrival <= o.arrival < q.end) <= 2
    ends = sorted(o.end for o in outcomes)
    # Every later request is sent when one finishes.
    assert all(any(a == pytest.approx(e) for e in ends) for a in arrivals[2:])


def _chunk(cached: int, new: int):  # type: ignore[no-untyped-def]
    from tandem.perf.model import Chunk

    return Chunk(cached, new)
