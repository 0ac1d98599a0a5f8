"""The stalls section's parts: gaps between tokens in virtual time, their summary, and
goodput under a bound on them."""

from __future__ import annotations

import statistics

import pytest

from tandem.sim.cluster import ClusterSim, Deployment, SimRequest
from tandem.sim.metrics import Percentiles, Slo
from tandem_dev.bench.goodput.points import Point, Split
from tandem_dev.bench.goodput.stalls import (
    GapBound,
    Run,
    Stalls,
    Variant,
    find_stall_goodput,
    summarize_gaps,
)


def test_gaps_summarize_tokens_and_streams() -> None:
    stalled = [0.004] * 99 + [0.1]
    smooth = [0.004] * 100
    stalls = summarize_gaps([stalled, smooth, []], limit_s=0.03)
    # 199 gaps, one of them 0.1 s: the token-level p99 (rank 196) does not see it...
    assert stalls.gaps == Percentiles(0.004, 0.004, 0.004)
    # ...the streams' longest gaps (0.004, 0.1) do; the empty stream counts in neither.
    assert stalls.longest == Percentiles(0.004, 0.1, 0.1)
    assert (stalls.worst, stalls.frozen) == (0.1, 0.5)
    with pytest.raises(ValueError, match="no stream had two chunks"):
        summarize_gaps([[], []], limit_s=0.03)


def _run(chunk: int, c: int, tps: float, longest_p90: float, tbt_p99: float) -> Run:
    split = Split(0, 4)
    pct = Percentiles(0.5, 0.5, 0.5)
    point = Point("model", "gb200", 32768, 1024, split, c, pct, Percentiles(0.005, 0.005, 0.005),
                  tps, 200.0, 10)  # fmt: skip
    gaps = Percentiles(0.004, 0.004, tbt_p99)
    stalls = Stalls(gaps, Percentiles(longest_p90, longest_p90, longest_p90), longest_p90, 0.0)
    return Run(Variant(split, chunk), point, stalls)


def test_goodput_under_a_bound_on_gaps() -> None:
    slo, limit = Slo(2.0, 0.006), 0.03
    big = _run(8192, 24, 4000.0, longest_p90=0.1, tbt_p99=0.02)
    small = _run(1024, 16, 3000.0, longest_p90=0.02, tbt_p99=0.02)
    worse = _run(2048, 24, 3900.0, longest_p90=0.031, tbt_p99=0.031)
    runs = [big, small, worse]
    assert find_stall_goodput(runs, slo, GapBound.NONE, limit) is big
    assert find_stall_goodput(runs, slo, GapBound.TOKENS_P99, limit) is big
    assert find_stall_goodput(runs, slo, GapBound.STREAMS_P90, limit) is small
    assert find_stall_goodput([big, worse], slo, GapBound.STREAMS_P90, limit) is None
    assert Variant(Split(0, 4), 2048).name == "agg 4, 2k chunks"
    assert Variant(Split(1, 3)).name == "1P3D"


def _short_stream_gaps(max_num_tokens: int) -> tuple[float, ...]:
    """A 200-token answer streaming on an aggregated worker when a 32k prompt arrives."""
    options = {"model": "gpt-oss-120b", "accelerator": "gb200", "kv_cache_dtype": "fp8",
               "max_num_tokens": max_num_tokens}  # fmt: skip
    sim = ClusterSim(Deployment(0, 1, options, options))
    outcomes = sim.run_open([SimRequest(0.0, 128, 200), SimRequest(0.05, 32768, 2)])
    short = next(o for o in outcomes if o.output_tokens == 200)
    assert len(short.gaps) == 199
    assert sum(short.gaps) == pytest.approx(short.end - short.first_token)
    return short.gaps


def test_a_prefill_chunk_stalls_the_streams_on_its_worker() -> None:
    big, small = _short_stream_gaps(8192), _short_stream_gaps(1024)
    # The mean hides it; the longest gap is the step that carried a chunk.
    assert max(big) > 10 * statistics.median(big)
    # Smaller chunks: shorter stalls, more of them.
    assert max(small) < max(big) / 2
    stalled = [g for g in small if g > 2 * statistics.median(small)]
    assert len(stalled) > len([g for g in big if g > 2 * statistics.median(big)])
