"""Lengths as distributions: the log-normal through a median and a p90 (its quantiles
checked on many seeded draws, the tail cut), a histogram's bars drawn by weight,
arrivals unchanged without a p90, a long tail of prompts that costs a deployment TTFT
the median alone hides, and a mix of two lengths the log-normal misjudges."""

from __future__ import annotations

import dataclasses
import math
import random
import statistics

import pytest

from tandem.sim.metrics import Slo
from tandem.sim.planner import (
    TAIL_CUT,
    Candidate,
    Lengths,
    Setup,
    Workload,
    evaluate,
    generate_arrivals,
)

OPTIONS = {"model": "gpt-oss-120b", "accelerator": "gb200", "kv_cache_dtype": "fp8"}


def test_a_median_alone_is_every_length() -> None:
    lengths = Lengths(1000)
    assert lengths.draw(random.Random(1)) == 1000
    assert lengths.mean == 1000


def test_draws_have_the_median_and_p90_they_were_given() -> None:
    lengths = Lengths(1000, 4000)
    rng = random.Random(7)
    draws = sorted(lengths.draw(rng) for _ in range(40_000))
    assert statistics.median(draws) == pytest.approx(1000, rel=0.03)
    assert draws[int(0.9 * len(draws))] == pytest.approx(4000, rel=0.05)
    assert max(draws) <= TAIL_CUT * 4000
    # The log-normal's mean, exp(mu + sigma^2 / 2), with sigma = ln(4) / z90.
    sigma = math.log(4) / 1.2815515655446004
    assert lengths.mean == pytest.approx(1000 * math.exp(sigma**2 / 2))


def test_no_draw_is_longer_than_the_model_accepts() -> None:
    # A p90 of 16k cuts at 64k; a model taking 32k prompts never sees one longer.
    rng = random.Random(5)
    draws = [Lengths(8192, 16384, limit=32768).draw(rng) for _ in range(20_000)]
    assert max(draws) == 32768
    workload = Workload(8192, 64, 4.0, Slo(1, 0.01), isl_p90=16384, max_isl=32768)
    assert max(r.prompt_tokens for r in generate_arrivals(workload, 2000, seed=5)) <= 32768


def test_without_a_p90_the_arrivals_are_those_of_fixed_lengths() -> None:
    fixed = Workload(1024, 64, 4.0, Slo(1, 0.01))
    spread = Workload(1024, 64, 4.0, Slo(1, 0.01), isl_p90=8192)
    a, b = generate_arrivals(fixed, 500, seed=3), generate_arrivals(spread, 500, seed=3)
    assert all(r.prompt_tokens == 1024 and r.output_tokens == 64 for r in a)
    assert len({r.prompt_tokens for r in b}) > 100
    assert all(r.output_tokens == 64 for r in b)


def test_a_long_tail_of_prompts_costs_ttft_the_median_hides() -> None:
    # One aggregated GB200 worker, 1k-token median prompts at 2 req/s: with a p90 of 16k
    # a tenth of the prompts take more than 16x the prefill time of the median one.
    setup, candidate = Setup(OPTIONS, OPTIONS, 2048), Candidate(0, 1, 1, 1)
    slo = Slo(2.0, 0.02)
    fixed = Workload(1024, 128, 2.0, slo)
    tail = Workload(1024, 128, 2.0, slo, isl_p90=16384)
    judged = [
        evaluate(candidate, w, setup, generate_arrivals(w, 300, seed=1), stop_early=False)
        for w in (fixed, tail)
    ]
    assert judged[1].ttft.p90 > 2 * judged[0].ttft.p90


def test_a_histogram_draws_its_bars_by_weight() -> None:
    lengths = Lengths(1024, bars=((1024, 3.0), (32768, 1.0)))
    rng = random.Random(11)
    draws = [lengths.draw(rng) for _ in range(20_000)]
    assert set(draws) == {1024, 32768}
    assert draws.count(32768) / len(draws) == pytest.approx(0.25, abs=0.01)
    assert lengths.mean == (3 * 1024 + 32768) / 4
    # The model's limit cuts a bar as it cuts a log-normal draw.
    cut = Lengths(1024, bars=((1024, 1.0), (65536, 1.0)), limit=32768)
    assert max(cut.draw(rng) for _ in range(100)) == 32768
    assert cut.mean == (1024 + 32768) / 2


def test_the_log_normal_through_a_mixs_median_and_p90_passes_what_the_mix_fails() -> None:
    # Two aggregated GB200 workers, 1k chat and 32k documents half and half at 5 req/s
    # (a model taking 32k prompts): its median is 1k and its p90 32k, and the log-normal
    # through those puts most of its long prompts in between, under half the mix's prompt
    # tokens. Drawn from the two bars, every second prompt is a 32k prefill that stalls
    # the workers' streams.
    setup, candidate = Setup(OPTIONS, OPTIONS, 2048), Candidate(0, 2, 1, 1)
    slo = Slo(2.0, 0.006)
    log_normal = Workload(1024, 64, 5.0, slo, isl_p90=32768, max_isl=32768)
    mix = dataclasses.replace(log_normal, isl_bars=((1024, 1.0), (32768, 1.0)))
    arrivals = {
        name: generate_arrivals(w, 300, seed=1)
        for name, w in (("log-normal", log_normal), ("mix", mix))
    }
    tokens = {name: statistics.fmean(r.prompt_tokens for r in a) for name, a in arrivals.items()}
    assert tokens["mix"] > 2 * tokens["log-normal"]
    judged = {
        name: evaluate(candidate, w, setup, arrivals[name], stop_early=False)
        for name, w in (("log-normal", log_normal), ("mix", mix))
    }
    assert judged["log-normal"].meets
    assert not judged["mix"].meets
