"""Which deployment serves a workload within its SLO on the fewest GPUs (``tandem plan``).

The search runs candidate deployments in virtual time (``ClusterSim``: the simulated
engine's scheduler and clock, the router's policy) under the workload's arrivals --
Poisson at the given rate, fixed ISL and OSL -- and checks the SLO on the requests after
a warm-up. GPU counts are tried from a lower bound up: the rate-matched ideal's tokens per
GPU at the ITL target bounds from above what any split can do, so no smaller count can
succeed. At each count the aggregated deployment and the disaggregated splits around
the rate-matched prefill:decode ratio are run; the first count with a deployment that
meets the SLO wins (ties: the lower p90 ITL). Like Dynamo's profiler / AIConfigurator,
it answers from a performance model, not from the cluster.

A workload may also bound stalls: how long 90% of streams may wait, at worst, between
two tokens. A per-request mean ITL hides a step that carries another prompt's prefill
chunk (~0.1 s for 8k tokens of a 32k prompt on a GB200) however often each stream hits
one; this bound does not.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tandem.engines.simulated import SimulatedConfig
from tandem.perf.ideal import IdealPoint, compute_rate_matched_curve, find_best_within
from tandem.perf.model import compute_kv_capacity, compute_prefill_seconds
from tandem.sim.cluster import ClusterSim, Deployment, Outcome, SimRequest
from tandem.sim.metrics import Percentiles, Slo, compute_percentiles

WARMUP_FRACTION = 0.2  # requests arriving in the first 20% of the run are not judged


@dataclass(frozen=True, slots=True)
class Workload:
    isl: int
    osl: int
    rate: float  # requests per second
    slo: Slo
    # Each stream's longest gap between two tokens, p90 over requests (None: unbounded).
    max_stall_s: float | None = None

    def describe_slo(self) -> str:
        if self.max_stall_s is None:
            return self.slo.describe()
        return f"{self.slo.describe()}, longest gap p90 <= {self.max_stall_s * 1e3:g} ms"


@dataclass(frozen=True, slots=True)
class Limits:
    """What the spec allows: workers per pool and GPUs per worker."""

    max_prefill: int
    max_decode: int
    prefill_tp: int
    decode_tp: int


@dataclass(frozen=True, slots=True)
class Candidate:
    prefill: int
    decode: int
    prefill_tp: int
    decode_tp: int

    @property
    def gpus(self) -> int:
        return self.prefill * self.prefill_tp + self.decode * self.decode_tp

    @property
    def name(self) -> str:
        workers = "worker" if self.prefill + self.decode == 1 else "workers"
        if self.prefill == 0:
            return f"aggregated, {self.decode} {workers}"
        return f"{self.prefill} prefill + {self.decode} decode {workers}"


@dataclass(frozen=True, slots=True)
class Evaluation:
    candidate: Candidate
    ttft: Percentiles
    itl: Percentiles
    longest_gap: Percentiles  # each judged stream's longest wait between two tokens
    tokens_per_second_per_gpu: float
    tokens_per_second_per_user: float
    requests: int
    meets: bool
    # First token to last, averaged over the judged requests.
    mean_decode_seconds: float


@dataclass(frozen=True, slots=True)
class Recommendation:
    workload: Workload
    chosen: Evaluation | None
    evaluated: tuple[Evaluation, ...]
    ideal: tuple[IdealPoint, ...]
    # Where the step times came from: each distinct clock source of the two pools.
    clock_sources: tuple[str, ...]
    # Why nothing was chosen (None when something was).
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Setup:
    """The engines of both pools (from the spec) and the router's thresholds."""

    prefill_options: Mapping[str, object]
    decode_options: Mapping[str, object]
    min_prefill_tokens: int
    max_prefill_wait_seconds: float | None = None

    def deployment(self, prefill: int, decode: int) -> Deployment:
        return Deployment(
            prefill,
            decode,
            self.prefill_options,
            self.decode_options,
            self.min_prefill_tokens,
            self.max_prefill_wait_seconds,
        )


def generate_arrivals(workload: Workload, count: int, seed: int) -> list[SimRequest]:
    """``count`` Poisson arrivals at ``workload.rate`` (seeded)."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(count):
        t += rng.expovariate(workload.rate)
        out.append(SimRequest(t, workload.isl, workload.osl))
    return out


def evaluate(
    candidate: Candidate, workload: Workload, setup: Setup, arrivals: Sequence[SimRequest]
) -> Evaluation:
    deployment = setup.deployment(candidate.prefill, candidate.decode)
    # Stop judging a hopeless deployment once the run lasts far past its arrivals.
    horizon = arrivals[-1].arrival * 3 + 60.0
    outcomes = ClusterSim(deployment).run_open(arrivals, until=horizon)
    cutoff = arrivals[-1].arrival * WARMUP_FRACTION
    judged = [o for o in outcomes if o.arrival >= cutoff]
    unfinished = len(arrivals) - len(outcomes)
    return _summarize(candidate, workload, judged, unfinished)


def _summarize(
    candidate: Candidate, workload: Workload, judged: Sequence[Outcome], unfinished: int
) -> Evaluation:
    if not judged:
        worst = Percentiles(math.inf, math.inf, math.inf)
        return Evaluation(candidate, worst, worst, worst, 0.0, 0.0, 0, False, math.inf)
    ttft = compute_percentiles([o.ttft for o in judged])
    itl = compute_percentiles([o.itl for o in judged])
    longest_gap = compute_percentiles([max(o.gaps, default=0.0) for o in judged])
    users = sorted(1 / o.itl for o in judged if o.itl > 0)
    meets = (
        unfinished == 0
        and ttft.p90 <= workload.slo.ttft_p90_s
        and itl.p90 <= workload.slo.itl_p90_s
        and (workload.max_stall_s is None or longest_gap.p90 <= workload.max_stall_s)
    )
    return Evaluation(
        candidate,
        ttft,
        itl,
        longest_gap,
        workload.rate * workload.osl / candidate.gpus,
        users[len(users) // 2] if users else 0.0,
        len(judged),
        meets,
        sum(o.end - o.first_token for o in judged) / len(judged),
    )


def recommend(
    workload: Workload,
    setup: Setup,
    limits: Limits,
    *,
    requests: int = 150,
    seed: int = 1,
    progress: Callable[[Evaluation], None] = lambda _: None,
) -> Recommendation:
    prefill_config = SimulatedConfig.from_options(setup.prefill_options)
    decode_config = SimulatedConfig.from_options(setup.decode_options)
    capacity = compute_kv_capacity(decode_config.perf, decode_config.memory)
    ideal = tuple(
        compute_rate_matched_curve(
            prefill_config.clock,
            decode_config.clock,
            capacity,
            isl=workload.isl,
            osl=workload.osl,
            chunk_tokens=prefill_config.options.max_num_tokens,
        )
    )
    sources = tuple(dict.fromkeys((prefill_config.clock.source, decode_config.clock.source)))
    best = find_best_within(list(ideal), workload.slo.itl_p90_s)
    if best is None:
        alone = ideal[0].step_seconds if ideal else math.inf
        return Recommendation(
            workload, None, (), ideal, sources,
            f"no deployment can: one sequence alone decodes at {alone * 1e3:.1f} ms/token on "
            f"this GPU and parallelism, above the ITL target of "
            f"{workload.slo.itl_p90_s * 1e3:g} ms",
        )  # fmt: skip
    demand = workload.rate * workload.osl  # output tokens per second
    prefill_s = compute_prefill_seconds(
        prefill_config.clock, workload.isl, prefill_config.options.max_num_tokens
    )
    most = limits.max_prefill * limits.prefill_tp + limits.max_decode * limits.decode_tp
    lowest = max(1, math.ceil(demand / best.tokens_per_second_per_gpu))
    arrivals = generate_arrivals(workload, requests, seed)
    evaluated: list[Evaluation] = []
    for gpus in range(lowest, most + 1):
        fits = [
            evaluate(c, workload, setup, arrivals)
            for c in _candidates(gpus, limits, workload.rate * prefill_s, best)
        ]
        for e in fits:
            progress(e)
        evaluated += fits
        winners = [e for e in fits if e.meets]
        if winners:
            chosen = min(winners, key=lambda e: (e.itl.p90, e.ttft.p90))
            return Recommendation(workload, chosen, tuple(evaluated), ideal, sources)
    return Recommendation(
        workload, None, tuple(evaluated), ideal, sources,
        f"no deployment within the spec's limits ({limits.max_prefill} prefill and "
        f"{limits.max_decode} decode workers) meets the SLO at {workload.rate:g} requests/s",
    )  # fmt: skip


def _candidates(
    gpus: int, limits: Limits, prefill_busy: float, ideal: IdealPoint
) -> list[Candidate]:
    """Deployments of exactly ``gpus`` GPUs worth running: aggregated, and the splits
    whose prefill share is closest to the rate-matched one (``prefill_busy`` prefill
    workers would be busy all the time; the ideal says how many per decode worker)."""
    out = []
    if gpus % limits.decode_tp == 0 and gpus // limits.decode_tp <= limits.max_decode:
        out.append(Candidate(0, gpus // limits.decode_tp, limits.prefill_tp, limits.decode_tp))
    splits = []
    for prefill in range(1, limits.max_prefill + 1):
        rest = gpus - prefill * limits.prefill_tp
        if rest <= 0 or rest % limits.decode_tp:
            continue
        decode = rest // limits.decode_tp
        if decode > limits.max_decode or prefill < prefill_busy:
            continue  # a prefill pool busier than 100% only queues
        splits.append(Candidate(prefill, decode, limits.prefill_tp, limits.decode_tp))
    share = ideal.prefill_workers_per_decode_worker
    splits.sort(key=lambda c: abs(c.prefill / c.decode - share))
    return out + splits[:2]
