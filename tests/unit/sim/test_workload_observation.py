"""The served workload read from the frontends' length histograms: Prometheus' quantile
rule worked by hand, the frontend's own exposition parsed, and frontends compared one by
one (a restarted one, or one only a later scrape saw, leaves the others' counts intact)."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tandem.frontend.metrics import FrontendMetrics
from tandem.sim.workload_observation import (
    Histogram,
    LengthCounts,
    observe_between,
    parse_length_counts,
)

INF = math.inf


def test_the_quantile_interpolates_within_the_bucket_that_holds_the_rank() -> None:
    # 2 observations <= 10, 4 in (10, 20], 4 in (20, 40].
    h = Histogram((10, 20, 40, INF), (2, 6, 10, 10))
    assert h.quantile(0.5) == pytest.approx(10 + 10 * (5 - 2) / 4)  # 17.5
    assert h.quantile(0.9) == pytest.approx(20 + 20 * (9 - 6) / 4)  # 35
    assert h.quantile(0.1) == pytest.approx(0 + 10 * 1 / 2)  # from 0 below the first bound


def test_a_quantile_in_the_open_bucket_is_the_largest_finite_bound() -> None:
    h = Histogram((10, 20, INF), (1, 2, 10))
    assert h.quantile(0.9) == 20
    assert math.isnan(Histogram((10, INF), (0, 0)).quantile(0.5))


def _exposition(prompts: list[int], answers: list[int]) -> str:
    metrics = FrontendMetrics(CollectorRegistry())
    for n in prompts:
        metrics.prompt_length.observe(n)
    for n in answers:
        metrics.answer_length.observe(n)
    return generate_latest(metrics.registry).decode()


def test_the_frontends_own_exposition_parses_into_its_histograms() -> None:
    counts = parse_length_counts(_exposition([1000, 1000, 30000], [200]))
    assert counts.prompts.total == 3
    assert counts.answers.total == 1
    assert counts.prompts.bounds[-1] == INF
    # 1000 tokens fall at or below the 1024 bucket, 30000 above the 26008 one.
    by_bound = dict(zip(counts.prompts.bounds, counts.prompts.counts, strict=True))
    assert (by_bound[813], by_bound[1024], by_bound[26008], by_bound[32768]) == (0, 2, 2, 3)


def test_an_exposition_without_the_histograms_reads_as_empty() -> None:
    counts = parse_length_counts("# HELP up x\n# TYPE up gauge\nup 1\n")
    assert counts == LengthCounts()


def test_the_window_is_each_frontends_difference_added_up() -> None:
    before = {
        "a": parse_length_counts(_exposition([1000] * 4, [100] * 4)),
        "b": parse_length_counts(_exposition([1000] * 50, [100] * 50)),  # restarts below
    }
    after = {
        "a": parse_length_counts(_exposition([1000] * 4 + [30000] * 10, [100] * 4 + [900] * 10)),
        "b": parse_length_counts(_exposition([1000] * 2, [100] * 2)),  # counters fell
        "c": parse_length_counts(_exposition([5] * 99, [5] * 99)),  # not in the first scrape
    }
    seen = observe_between(before, after, 20.0)
    assert seen is not None
    # Only frontend a counts: 10 prompts of 30,000 tokens (bucket (26008, 32768]) in 20 s.
    assert seen.requests == 10
    assert seen.requests_per_second == pytest.approx(0.5)
    assert 26008 < seen.isl_p50 <= 32768
    assert 813 < seen.osl_p50 <= 1024


def test_a_window_with_no_request_observes_nothing() -> None:
    same = {"a": parse_length_counts(_exposition([1000], [10]))}
    assert observe_between(same, same, 30.0) is None
    assert observe_between({}, same, 30.0) is None


def test_the_histogram_is_each_non_empty_bucket_at_its_upper_bound() -> None:
    # 2 in (0, 10], none in (10, 20], 4 in (20, 40], 3 beyond 40.
    h = Histogram((10, 20, 40, INF), (2, 2, 6, 9))
    assert h.bars() == ((10, 2), (40, 4), (40, 3))


def test_a_window_of_1k_chat_and_32k_documents_observes_two_bars() -> None:
    earlier = {"a": parse_length_counts(_exposition([], []))}
    later = {"a": parse_length_counts(_exposition([1000] * 30 + [32000] * 10, [64] * 40))}
    seen = observe_between(earlier, later, 10.0)
    assert seen is not None
    # Each length's bucket (bounds 2**(k/3): 1000 in (812, 1024], 32000 in (26008, 32768]).
    assert seen.isl_bars == ((1024, 30), (32768, 10))
    assert [t for t, _ in seen.osl_bars] == [64]  # 64 in (51, 64]
