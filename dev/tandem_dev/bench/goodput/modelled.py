"""The same deployments in virtual time (``tandem.sim``): the point aiperf would measure
if the plumbing cost nothing."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from tandem.sim.cluster import ClusterSim, Deployment, Outcome, SimRequest
from tandem.sim.metrics import compute_percentiles
from tandem_dev.bench.goodput.points import (
    Point,
    Record,
    Split,
    compute_steady_throughput,
)
from tandem_dev.bench.goodput.stack import MIN_PREFILL_TOKENS


def simulate_outcomes(
    profile: str, isl: int, osl: int, split: Split, concurrency: int, requests: int,
    ramp_s: float, max_num_tokens: int | None = None,
) -> list[Outcome]:  # fmt: skip
    """Every request of a closed-loop run; ``max_num_tokens`` sets the engines' step
    budget (the prefill chunk of an aggregated worker), else their default."""
    options: dict[str, object] = {
        "model": "gpt-oss-120b", "accelerator": profile, "kv_cache_dtype": "fp8",
    }  # fmt: skip
    if max_num_tokens is not None:
        options["max_num_tokens"] = max_num_tokens
    sim = ClusterSim(Deployment(split.prefill, split.decode, options, options, MIN_PREFILL_TOKENS))
    return sim.run_closed(lambda _: SimRequest(0.0, isl, osl), concurrency, requests, ramp_s=ramp_s)


def summarize_outcomes(
    outcomes: Sequence[Outcome], profile: str, isl: int, osl: int, split: Split,
    concurrency: int,
) -> Point:  # fmt: skip
    records = [Record(o.arrival, o.first_token, o.end, o.output_tokens) for o in outcomes]
    return Point(
        source="model",
        profile=profile,
        isl=isl,
        osl=osl,
        split=split,
        concurrency=concurrency,
        ttft=compute_percentiles([o.ttft for o in outcomes]),
        itl=compute_percentiles([o.itl for o in outcomes]),
        tokens_per_second=compute_steady_throughput(records, concurrency),
        tokens_per_second_per_user=statistics.median(1 / o.itl for o in outcomes if o.itl > 0),
        requests=len(outcomes),
    )


def simulate_point(
    profile: str, isl: int, osl: int, split: Split, concurrency: int, requests: int, ramp_s: float
) -> Point:
    outcomes = simulate_outcomes(profile, isl, osl, split, concurrency, requests, ramp_s)
    return summarize_outcomes(outcomes, profile, isl, osl, split, concurrency)
