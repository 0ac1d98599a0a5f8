"""The deployments each trace is replayed against (pure).

All of them share the autoscale section's base (``autoscale_live``: TP1 simulated GB200 or
B200 workers at real time, conditional disaggregation at 2,048 tokens, at most 4 prefill and
2 decode workers: the GPU budget) and are sized for the trace's average load
(:func:`average_workload`). The static rows are ``tandem plan``'s search
(``tandem.sim.planner.recommend``) within that budget, one layout at a time, and
AIConfigurator's picks for the same load (its driver: ``planners.aic_driver``), each
run as it picks it where that fits the budget; and ``tandem plan``'s pick for the
trace's busiest stretch (:func:`peak_workload`), the static deployment that holds the
SLO throughout where the ones sized for the average miss every burst: the bar the
issue's "best static deployment that reaches 95%" names.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tandem.api.v1alpha1 import AcceleratorProfile, InferenceCluster
from tandem.perf.measured import MODELS, SYSTEMS
from tandem.sim.planner import (
    Candidate,
    Limits,
    Setup,
    Workload,
    count_requests,
    evaluate,
    generate_arrivals,
    recommend,
)
from tandem.sim.spec_plan import SEED, compute_workload, describe_shape
from tandem.sim.spec_setup import compute_setup
from tandem_dev.autoscale_sim.traces import Arrival
from tandem_dev.bench.adaptive.traces import OUTPUT_TOKENS
from tandem_dev.bench.autoscale_live.__main__ import VARIANTS, render_live_cluster
from tandem_dev.bench.autoscale_live.report import SLO
from tandem_dev.bench.goodput.stack import MODEL
from tandem_dev.bench.planners.tandem_side import read_aic_pick

STATIC_AGGREGATED, STATIC_DISAGGREGATED = "static aggregated", "static disaggregated"
STATIC_PEAK = "static for the peak"
AIC_AGGREGATED, AIC_DISAGGREGATED = "AIConfigurator aggregated", "AIConfigurator disaggregated"
AUTOSCALING, PLANNING = "autoscaling", "planning auto"
STATIC_ROWS = (
    STATIC_AGGREGATED, STATIC_DISAGGREGATED, STATIC_PEAK, AIC_AGGREGATED, AIC_DISAGGREGATED,
)  # fmt: skip
ROWS = (*STATIC_ROWS, AUTOSCALING, PLANNING)
AIC_ROWS = {AIC_AGGREGATED: "agg", AIC_DISAGGREGATED: "disagg"}  # its driver's modes
# Re-planning at the shortest hysteresis the API allows: the traces last minutes.
REPLAN = {"windowSeconds": 30, "minIntervalSeconds": 60, "tolerance": 0.5}


@dataclass(frozen=True, slots=True)
class AverageWorkload:
    isl: int  # median prompt
    isl_p90: int
    osl: int
    requests_per_second: float
    isl_mean: int  # what a planner taking one prompt length is given
    # Each prompt length and its count, where the trace has more than one.
    isl_counts: tuple[tuple[int, int], ...] = ()

    def to_wire(self) -> dict[str, Any]:
        # The p90 too: a mix of 1k and 32k prompts has a 1k median, and planned on the
        # median alone it gets a deployment that never meets a 32k burst (an aggregated
        # worker whose decode streams stall behind every long prompt). The planner's
        # draws stop at the model's context (maxInputTokens), so a 32k p90 is fine. And
        # a mix's histogram: the log-normal through its median and p90 holds under half
        # of its prompt tokens.
        wire: dict[str, Any] = {
            "isl": self.isl,
            "islP90": self.isl_p90,
            "osl": self.osl,
            "requestsPerSecond": {"min": 0, "max": self.requests_per_second},
        }
        if self.isl_counts:
            wire["islHistogram"] = [{"tokens": t, "weight": n} for t, n in self.isl_counts]
        return wire


def average_workload(arrivals: Sequence[Arrival], seconds: float) -> AverageWorkload:
    """The trace's lengths and its mean rate (two significant digits, rounded up)."""
    prompts = sorted(a.prompt_tokens for a in arrivals)
    mean = round(statistics.fmean(prompts))
    isl = int(statistics.median_low(prompts))
    p90 = prompts[min(len(prompts) - 1, math.ceil(0.9 * len(prompts)) - 1)]
    rate = len(arrivals) / seconds
    scale = 10 ** (math.floor(math.log10(rate)) - 1)
    rate = round(math.ceil(rate / scale) * scale, 6)
    counts = sorted(collections.Counter(prompts).items())
    return AverageWorkload(
        isl, max(isl, p90), OUTPUT_TOKENS, rate, mean, tuple(counts) if len(counts) > 1 else ()
    )


@dataclass(frozen=True, slots=True)
class TraceLoads:
    """What each row of a trace is sized for."""

    average: AverageWorkload  # the whole trace: the static rows', autoscaling's spec.workload
    deployed: AverageWorkload  # what a user knows at deploy time: planning auto's
    peak: AverageWorkload  # the busiest stretch: the static row for the peak's


# The busiest stretch a static deployment must hold through: an eighth of the trace (a
# ramp's top step, half a burst).
PEAK_SHARE = 1 / 8


def peak_workload(arrivals: Sequence[Arrival], seconds: float) -> AverageWorkload:
    """The workload of the trace's busiest stretch (``PEAK_SHARE`` of it, the most prompt
    tokens arriving): what a static deployment that meets the SLO throughout is sized
    for, where one sized for the average load misses every burst."""
    window = seconds * PEAK_SHARE
    starts = [a.at for a in arrivals if a.at + window <= seconds] or [0.0]

    def inside(start: float) -> list[Arrival]:
        return [a for a in arrivals if start <= a.at < start + window]

    busiest = max(starts, key=lambda start: sum(a.prompt_tokens for a in inside(start)))
    return average_workload(inside(busiest), window)


# What a user knows when deploying: the trace's first quarter (bursty's quiet first
# phase, drift's all-short first step, the ramp's low start).
DEPLOY_TIME_SHARE = 0.25


def deploy_time_workload(arrivals: Sequence[Arrival], seconds: float) -> AverageWorkload:
    """The workload of the trace's first ``DEPLOY_TIME_SHARE``: the planning row's
    ``spec.workload``. Planned on the whole trace's average instead, it starts with the
    drift and the bursts already inside its envelope, and never re-plans."""
    window = seconds * DEPLOY_TIME_SHARE
    return average_workload([a for a in arrivals if a.at < window], window)


def render_base(name: str, workload: AverageWorkload, profile: str) -> dict[str, Any]:
    """The autoscale section's hand-written 1P+1D under its default policy on ``profile``'s
    simulated workers, with the SLO and the trace's average workload."""
    document = render_live_cluster(name, VARIANTS[0], profile)
    spec = document["spec"]
    spec["slo"] = {"ttftP90Seconds": SLO.ttft_p90_s, "itlP90Seconds": SLO.itl_p90_s}
    spec["workload"] = workload.to_wire()
    return document


def render_planned(name: str, workload: AverageWorkload, profile: str) -> dict[str, Any]:
    document = render_base(name, workload, profile)
    document["spec"]["planning"] = {"mode": "auto", "replan": REPLAN}
    return document


def choose_static(document: dict[str, Any]) -> dict[str, Candidate | None]:
    """The fewest-GPU deployment meeting the SLO of each layout (None: none within the
    budget), TP1 workers (the live replay counts one GPU per process): ``tandem plan``'s
    search for one layout at a time where it picks that layout, else its simulator on
    each split in order of GPUs."""
    workload, setup, limits = _search_inputs(document)
    aggregated = recommend(workload, setup, dataclasses.replace(limits, max_prefill=0), seed=SEED)
    full = recommend(workload, setup, limits, seed=SEED)
    split = full.chosen.candidate if full.chosen and full.chosen.candidate.prefill else None
    return {
        STATIC_AGGREGATED: aggregated.chosen.candidate if aggregated.chosen else None,
        STATIC_DISAGGREGATED: split or _first_split_meeting(workload, setup, limits),
    }


def choose_peak(document: dict[str, Any]) -> Candidate | None:
    """``tandem plan``'s fewest-GPU deployment of either layout for ``document``'s
    workload (the trace's peak: :func:`peak_workload`); None: none within the budget."""
    workload, setup, limits = _search_inputs(document)
    chosen = recommend(workload, setup, limits, seed=SEED).chosen
    return chosen.candidate if chosen else None


def _search_inputs(document: dict[str, Any]) -> tuple[Workload, Setup, Limits]:
    """The planner's workload, engines and budget for ``document``, TP1 workers only."""
    spec = InferenceCluster.model_validate(document).spec
    setup, limits = compute_setup(spec)
    return compute_workload(spec), setup, dataclasses.replace(limits, tensor_parallel_sizes=(1,))


def _first_split_meeting(workload: Workload, setup: Setup, limits: Limits) -> Candidate | None:
    """The search stops at the fewest GPUs that meet the SLO, often aggregated: the
    disaggregated splits (at least one worker each) in order of GPUs, the first that
    meets."""
    arrivals = generate_arrivals(workload, count_requests(workload), SEED)
    for gpus in range(2, limits.max_prefill + limits.max_decode + 1):
        for prefill in range(1, min(limits.max_prefill, gpus - 1) + 1):
            decode = gpus - prefill
            if decode > limits.max_decode:
                continue
            candidate = Candidate(prefill, decode, 1, 1)
            if evaluate(candidate, workload, setup, arrivals).meets:
                return candidate
    return None


def render_static(
    name: str, workload: AverageWorkload, profile: str, candidate: Candidate
) -> dict[str, Any]:
    """``candidate``'s pools, fixed: no autoscaling, no planning."""
    document = render_base(name, workload, profile)
    spec = document["spec"]
    spec.pop("autoscaling")
    spec["prefill"].update(
        {"replicas": candidate.prefill, "minReplicas": 0, "maxReplicas": candidate.prefill}
    )
    spec["decode"].update(
        {"replicas": candidate.decode, "minReplicas": 1, "maxReplicas": candidate.decode}
    )
    limits = {
        "max_num_tokens": candidate.max_num_tokens,
        "max_batch_size": candidate.max_batch_size,
    }
    spec["engine"]["options"].update({k: v for k, v in limits.items() if v is not None})
    return document


def build_aic_request(key: str, profile: str, workload: AverageWorkload) -> dict[str, Any]:
    """AIConfigurator's ``recommend`` item for a trace's average load. It takes one prompt
    length: the mean (a mix of 1k and 32k prompts costs what its mean costs in prefill),
    and reads the SLO's percentiles as its own figures (TTFT and TPOT)."""
    return {
        "id": key,
        "model": MODELS[MODEL],
        "system": SYSTEMS[AcceleratorProfile(profile)],
        "isl": workload.isl_mean,
        "osl": workload.osl,
        "ttft_ms": SLO.ttft_p90_s * 1e3,
        "tpot_ms": SLO.itl_p90_s * 1e3,
        "rate": workload.requests_per_second,
    }


def choose_aic(
    document: dict[str, Any], recommended: Mapping[str, Any]
) -> dict[str, Candidate | str]:
    """AIConfigurator's pick of each layout (its driver's ``recommend`` entry) as a
    deployment to run, or why none runs: it found none, or the pick is outside the
    budget (more workers than the pools allow, or TP above 1: the live replay counts a
    worker process as one GPU)."""
    spec = InferenceCluster.model_validate(document).spec
    _, limits = compute_setup(spec)
    chosen: dict[str, Candidate | str] = {}
    for row, mode in AIC_ROWS.items():
        pick = recommended.get(mode)
        if pick is None:
            error = recommended.get("error")
            chosen[row] = f"AIConfigurator finds none{f' ({error})' if error else ''}"
            continue
        candidate = read_aic_pick(pick)
        if isinstance(candidate, str):
            chosen[row] = f"AIConfigurator's pick has {candidate}"
        elif (
            candidate.prefill > limits.max_prefill
            or candidate.decode > limits.max_decode
            or max(candidate.prefill_tp, candidate.decode_tp) > 1
        ):
            chosen[row] = f"AIConfigurator picks {describe_shape(candidate)}: outside the budget"
        else:
            chosen[row] = candidate
    return chosen
