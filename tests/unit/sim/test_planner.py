"""The planner: candidates and arrivals (pure), answers that need no simulation (an SLO
no GPU can meet, limits too small for the load), one small search checked for
consistency, and the spec it plans from."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tandem.api.validate import load_inference_cluster
from tandem.engines.simulated import SimulatedConfig
from tandem.perf.ideal import IdealPoint
from tandem.perf.model import Chunk
from tandem.sim.cluster import ClusterSim, Outcome
from tandem.sim.metrics import Slo, compute_percentiles, misses_over_p90
from tandem.sim.planner import (
    LIFETIMES,
    MIN_REQUESTS,
    SHORT_STEP_TOKENS,
    WARMUP_FRACTION,
    Candidate,
    Limits,
    Setup,
    Shape,
    Workload,
    _splits,
    _summarize,
    compute_shapes,
    count_requests,
    evaluate,
    generate_arrivals,
    recommend,
)
from tandem.sim.spec_setup import PlanSpecError, compute_setup

EXAMPLES = Path(__file__).parents[3] / "manifests" / "examples"
OPTIONS = {"model": "gpt-oss-120b", "accelerator": "gb200", "kv_cache_dtype": "fp8"}
SETUP = Setup(OPTIONS, OPTIONS, 2048)


def test_arrivals_are_seeded_poisson_at_the_rate() -> None:
    workload = Workload(1024, 64, 4.0, Slo(1, 0.01))
    a = generate_arrivals(workload, 2000, seed=3)
    assert a == generate_arrivals(workload, 2000, seed=3) != generate_arrivals(workload, 2000, 4)
    assert all(r.prompt_tokens == 1024 and r.output_tokens == 64 for r in a)
    assert a[-1].arrival / len(a) == pytest.approx(1 / 4.0, rel=0.1)


def test_candidates_at_a_gpu_count() -> None:
    limits = Limits(max_prefill=3, max_decode=4, prefill_tp=1, decode_tp=2)
    ideal = IdealPoint(8, 0.005, 0.5, 1000.0)  # half a prefill worker per decode worker
    # 6 GPUs: splits 2P + 2D(TP2) (ratio 1.0), 4P is over the limit, odd prefill counts
    # leave an odd number of GPUs for TP2 decode workers.
    assert _splits(6, limits, 0.0, ideal, 1, 2) == [Candidate(2, 2, 1, 2)]
    # 7 GPUs: 1P + 3D (ratio 0.33), 3P + 2D (1.5): the closer to 0.5 first.
    assert _splits(7, limits, 0.0, ideal, 1, 2) == [Candidate(1, 3, 1, 2), Candidate(3, 2, 1, 2)]
    # A prefill pool that would be busier than 100% is not worth trying.
    assert _splits(7, limits, 2.5, ideal, 1, 2) == [Candidate(3, 2, 1, 2)]
    # Aggregated: as many workers of the shape's TP as the count holds, within the limit.
    shape = Shape(None, 2, None, (ideal,), ideal, 0.0, 1, ())
    assert shape.candidates(6, limits) == [Candidate(0, 3, 2, 2)]
    assert shape.candidates(7, limits) == shape.candidates(10, limits) == []


@pytest.mark.parametrize(
    ("candidate", "name"),
    [
        (Candidate(0, 1, 1, 1), "aggregated, 1 TP1 worker"),
        (Candidate(0, 4, 4, 4), "aggregated, 4 TP4 workers"),
        (Candidate(0, 2, 4, 4, 2048), "aggregated, 2 TP4 workers, 2048 tokens/step"),
        (Candidate(1, 1, 1, 1), "1 prefill TP1 + 1 decode TP1 workers"),
        (Candidate(3, 1, 1, 4), "3 prefill TP1 + 1 decode TP4 workers"),
    ],
)
def test_candidate_names(candidate: Candidate, name: str) -> None:
    assert candidate.name == name


def test_an_itl_no_gpu_reaches_is_refused_without_simulating() -> None:
    result = recommend(Workload(1024, 64, 1.0, Slo(1.0, 0.001)), SETUP, Limits(4, 4, 1, 1))
    assert result.chosen is None and not result.evaluated
    assert result.reason is not None
    # The ideal's one sequence sits at the request's mean context: 1024 + 64 / 2 tokens.
    alone = SimulatedConfig.from_options(OPTIONS).clock.step_seconds([1024 + 32], ())
    assert f"one sequence alone decodes at {alone * 1e3:.1f} ms/token" in result.reason


def test_limits_too_small_for_the_load_are_named() -> None:
    # 20 requests/s of 1024 answer tokens need far more than two GB200s at 6 ms ITL.
    result = recommend(Workload(1024, 1024, 20.0, Slo(1.0, 0.006)), SETUP, Limits(1, 1, 1, 1))
    assert result.chosen is None
    assert result.reason is not None and "1 prefill and 1 decode workers" in result.reason


def test_the_choice_has_the_fewest_gpus_that_meet_the_slo() -> None:
    workload = Workload(1024, 32, 8.0, Slo(0.2, 0.004))
    result = recommend(workload, SETUP, Limits(2, 3, 1, 1), requests=60)
    assert result.chosen is not None and result.chosen.meets
    fewer = [e for e in result.evaluated if e.candidate.gpus < result.chosen.candidate.gpus]
    assert all(not e.meets for e in fewer)
    assert result.chosen.tokens_per_second_per_gpu == pytest.approx(
        8.0 * 32 / result.chosen.candidate.gpus
    )


def test_a_stall_bound_judges_each_streams_longest_gap() -> None:
    # Ten streams of 5 ms gaps, two of them held once for 100 ms: the mean ITL barely
    # moves, the longest gap's p90 (rank 8 of 0..9) is one of the held ones.
    smooth = Outcome(0.0, 0.1, 0.1 + 0.005 * 20, 21, remote=False, gaps=(0.005,) * 20)
    held = Outcome(0.0, 0.1, 0.1 + 0.005 * 19 + 0.1, 21, remote=False,
                   gaps=(0.005,) * 19 + (0.1,))  # fmt: skip
    judged = [smooth] * 8 + [held] * 2
    agg = Candidate(0, 1, 1, 1)
    free = _summarize(agg, Workload(1024, 21, 1.0, Slo(1.0, 0.01)), judged, 0)
    bound = _summarize(agg, Workload(1024, 21, 1.0, Slo(1.0, 0.01), 0.03), judged, 0)
    assert free.meets and not bound.meets
    assert bound.longest_gap.p90 == pytest.approx(0.1)
    assert bound.longest_gap.p50 == pytest.approx(0.005)
    assert Workload(1024, 21, 1.0, Slo(1.0, 0.01), 0.03).describe_slo() == (
        "TTFT p90 <= 1 s, ITL p90 <= 10 ms, longest gap p90 <= 30 ms"
    )


def test_bounding_stalls_moves_long_prompts_off_streaming_workers() -> None:
    """32k prompts among streams: unbounded, the fewest GPUs are aggregated workers whose
    streams wait out each other's prefill chunks; bounded, the choice separates them."""
    slo = Slo(2.0, 0.01)
    limits = Limits(2, 2, 1, 1)
    free = recommend(Workload(32768, 256, 0.5, slo), SETUP, limits, requests=40)
    bound = recommend(Workload(32768, 256, 0.5, slo, 0.03), SETUP, limits, requests=40)
    assert free.chosen is not None and free.chosen.candidate.prefill == 0
    assert free.chosen.longest_gap.p90 > 0.03
    assert bound.chosen is not None
    # Separated, or aggregated with shorter chunks in each step (the search tries both).
    chosen = bound.chosen.candidate
    assert chosen.prefill > 0 or chosen.max_num_tokens == SHORT_STEP_TOKENS
    assert bound.chosen.longest_gap.p90 <= 0.03
    assert bound.chosen.candidate.gpus >= free.chosen.candidate.gpus


def test_a_light_load_is_served_by_one_tp1_worker_whatever_the_spec_says() -> None:
    """One request a second of 64 tokens at a 20 ms ITL target: one GB200 decodes a
    sequence in a few ms, so one GPU serves it, and no deployment has fewer. The spec's
    TP4 decode pool is where the search starts, not what it must use."""
    workload = Workload(1024, 64, 1.0, Slo(1.0, 0.02))
    limits = Limits(2, 2, 1, 4, tensor_parallel_sizes=(1, 2, 4))
    result = recommend(workload, SETUP, limits, requests=40)
    assert result.chosen is not None
    assert result.chosen.candidate == Candidate(0, 1, 1, 1)
    assert result.evaluated[0].candidate.gpus == 1  # the search began at one GPU


def test_a_stall_bound_no_aggregated_step_can_meet_is_met_by_disaggregation() -> None:
    """32k prompts with streams bounded to 10 ms gaps: every step of an aggregated worker
    that carries a chunk of 2,048 prompt tokens (the shortest budget the search tries)
    takes longer than that on any TP size, and each stream sees such steps; a decode
    worker that never prefills long prompts does not."""
    sizes = (1, 2, 4)
    for tp in sizes:
        clock = SimulatedConfig.from_options({**OPTIONS, "tensor_parallel_size": tp}).clock
        assert clock.step_seconds([33000], (Chunk(0, SHORT_STEP_TOKENS),)) > 0.010
    workload = Workload(32768, 256, 0.5, Slo(3.0, 0.008), max_stall_s=0.010)
    limits = Limits(4, 2, 1, 4, tensor_parallel_sizes=sizes)
    result = recommend(workload, SETUP, limits, requests=40)
    assert result.chosen is not None and result.chosen.candidate.prefill > 0
    assert all(not e.meets for e in result.evaluated if e.candidate.prefill == 0)


def test_the_search_bounds_each_shape_by_its_ideal() -> None:
    workload = Workload(32768, 1024, 2.0, Slo(2.0, 0.006))
    limits = Limits(4, 4, 1, 4, tensor_parallel_sizes=(1, 2, 4))
    shapes = compute_shapes(workload, SETUP, limits)
    # Aggregated and disaggregated shapes of every size that reaches the target.
    assert {(s.prefill_tp, s.decode_tp) for s in shapes} >= {(None, 4), (1, 4)}
    efficiency = [s.best.tokens_per_second_per_gpu for s in shapes]
    assert efficiency == sorted(efficiency, reverse=True)
    for shape in shapes:
        # No deployment of the shape beats its ideal: fewer GPUs cannot carry the tokens.
        demand = workload.rate * workload.osl
        assert (shape.fewest_gpus - 1) * shape.best.tokens_per_second_per_gpu < demand
        assert shape.best.step_seconds <= workload.slo.itl_p90_s


def test_setups_from_specs() -> None:
    trtllm = load_inference_cluster(EXAMPLES / "gpt-oss-120b-gb200.yaml").spec
    setup, limits = compute_setup(trtllm)
    assert (limits.prefill_tp, limits.decode_tp) == (1, 4)
    assert (limits.max_prefill, limits.max_decode) == (16, 8)
    assert setup.decode_options["kv_cache_dtype"] == "fp8"
    assert setup.decode_options["tensor_parallel_size"] == 4
    assert setup.decode_options["accelerator"] == "gb200"
    assert setup.min_prefill_tokens == 1024
    with pytest.raises(PlanSpecError, match=r"^engine\.kind: .*`tandem profile -f FILE"):
        compute_setup(load_inference_cluster(EXAMPLES / "reference-cpu.yaml").spec)


@pytest.mark.parametrize("count", [1, 2, 9, 10, 11, 114, 150])
def test_the_misses_that_decide_a_p90_are_what_the_percentile_says(count: int) -> None:
    enough = misses_over_p90(count)
    for misses in range(count + 1):
        values = [1.0] * (count - misses) + [3.0] * misses
        assert (compute_percentiles(values).p90 > 2.0) == (misses >= enough)


def test_a_run_stops_once_its_misses_decide_and_a_full_run_agrees() -> None:
    # One TP1 worker at 4 req/s of 32k prompts: twice what it prefills (~0.5 s each).
    workload = Workload(32768, 64, 4.0, Slo(1.0, 0.05))
    candidate = Candidate(0, 1, 1, 1)
    arrivals = generate_arrivals(workload, 60, seed=2)
    stopped = evaluate(candidate, workload, SETUP, arrivals)
    assert stopped.stopped is not None and "over the TTFT target" in stopped.stopped
    assert not stopped.meets
    # The same run to its end: its judged TTFT p90 is over the target indeed.
    cutoff = arrivals[-1].arrival * WARMUP_FRACTION
    outcomes = ClusterSim(SETUP.for_candidate(candidate)).run_open(arrivals)
    judged = [o.ttft for o in outcomes if o.arrival >= cutoff]
    assert len(judged) == sum(1 for r in arrivals if r.arrival >= cutoff)
    assert compute_percentiles(judged).p90 > workload.slo.ttft_p90_s
    assert stopped.requests < len(judged)  # it stopped before the end


def test_a_run_spans_request_lifetimes_whatever_the_rate() -> None:
    # 1k/1k at 6 ms per token: a request lives 0.5 + 999 x 0.006 = 6.5 s.
    slow, fast = (Workload(1024, 1000, rate, Slo(0.5, 0.006)) for rate in (1.0, 64.0))
    assert count_requests(slow) == MIN_REQUESTS  # 1 req/s x 6.5 s x 5 = 33: the floor
    arrivals = generate_arrivals(fast, count_requests(fast), seed=1)
    assert arrivals[-1].arrival >= LIFETIMES * 6.49 * 0.95  # Poisson: about the span asked


def test_a_batch_limit_lets_fewer_gpus_meet_the_itl_target() -> None:
    # 1k/1k at 2 req/s on one B200, ITL p90 6 ms: uncapped, bursts batch past what a 6 ms
    # step holds; capped at the ideal's batch, the excess waits (TTFT 0.5 s has room).
    options = {**OPTIONS, "accelerator": "b200", "kv_cache_dtype": "bf16"}
    workload = Workload(1000, 1000, 2.0, Slo(0.5, 0.006))
    setup = Setup(options, options, 2048)
    result = recommend(workload, setup, Limits(2, 2, 1, 1, (1,)))
    assert result.chosen is not None
    chosen = result.chosen.candidate
    assert (chosen.gpus, chosen.prefill) == (1, 0)
    assert chosen.max_batch_size is not None and chosen.max_batch_size < 256
    same = replace(chosen, max_batch_size=None)
    assert not next(e for e in result.evaluated if e.candidate == same).meets
