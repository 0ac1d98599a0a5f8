"""Which deployment serves a workload within its SLO on the fewest GPUs (``tandem plan``).

The search runs candidate deployments in virtual time (``ClusterSim``: the simulated
engine's scheduler and clock, the router's policy) under the workload's arrivals --
Poisson at the given rate, ISL and OSL fixed at their medians or, with a p90 as well,
drawn from the log-normal through both -- and checks the SLO on the requests after a
warm-up. Like Dynamo's profiler / AIConfigurator, it answers from a performance model,
not from the cluster.

The spec's parallelism is a starting point, not a limit: every *shape* -- aggregated
workers of each tensor-parallel size, and each pair of prefill and decode sizes -- that
fits the model on the profile's nodes is a way to serve. Each shape's rate-matched ideal
(its clocks' tokens per GPU at the ITL target) bounds from above what any deployment of
that shape can do, so it also bounds from below the GPUs the shape needs. GPU counts are
tried from the lowest such bound up; at each count the shapes whose bound allows it are
run, most efficient first (aggregated workers as they are, disaggregated splits around
the rate-matched prefill:decode ratio); the first count with a deployment that meets the
SLO wins (ties: the lower p90 ITL). Worker counts stay within the spec's maxReplicas.
Each candidate is also tried with its decode workers' batch capped at its shape's ideal
batch (as AIConfigurator sizes batches): a burst then queues for a slot, paying in TTFT,
instead of stretching every stream's steps past the ITL target.

A workload may also bound stalls: how long 90% of streams may wait, at worst, between
two tokens. A per-request mean ITL hides a step that carries another prompt's prefill
chunk (~0.13 s for the last 8k chunk of a 32k prompt on one GB200) however often each
stream hits one; this bound does not. With one, aggregated shapes are also tried with a
2,048-token step budget, which shortens those stalls at the cost of prefill speed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from tandem.engines.simulated import SimulatedConfig, SimulatedConfigError
from tandem.perf.ideal import IdealPoint, compute_rate_matched_curve, find_best_within
from tandem.perf.model import KvCapacity, compute_prefill_seconds
from tandem.sim.cluster import ClusterSim, Deployment, Outcome, SimRequest
from tandem.sim.metrics import Percentiles, Slo, compute_percentiles, misses_over_p90

WARMUP_FRACTION = 0.2  # requests arriving in the first 20% of the run are not judged
# A run's arrivals span at least this many request lifetimes (TTFT plus OSL tokens at the
# targets), so the warm-up covers one and the judged requests meet a full house: at a
# high rate 150 requests would all arrive before the first one finishes.
LIFETIMES = 5
MIN_REQUESTS = 150
# Deployments simulated at one GPU count at most, the most efficient shapes first.
CANDIDATES_PER_COUNT = 8
# The step budget aggregated shapes are also tried with under a stall bound.
SHORT_STEP_TOKENS = 2048


# Log-normal lengths are cut at this many times their p90: a draw from the far tail would
# be one request longer than anything the workload describes (1 in ~10^4 at p90 = 2x p50).
TAIL_CUT = 4.0
Z90 = 1.2815515655446004  # the standard normal's 90th percentile


# One bar of a length histogram: (tokens, weight); weights are relative.
Bar = tuple[int, float]


@dataclass(frozen=True, slots=True)
class Lengths:
    """Prompt or answer lengths: the median and, optionally, the 90th percentile; with
    both, the log-normal through them (cut at TAIL_CUT x p90, and at ``limit``: the most
    the model accepts, since the frontend refuses longer prompts and caps answers). With
    ``bars`` (a histogram), lengths are drawn from the bars by weight instead: a mix of
    1k chat and 32k documents is two bars, where the log-normal through its median and
    p90 puts most of its prompts in between and under-counts its prompt tokens."""

    p50: int
    p90: int | None = None
    limit: int | None = None
    bars: tuple[Bar, ...] = ()

    @property
    def sigma(self) -> float:
        return (
            0.0 if self.p90 is None or self.p90 <= self.p50 else math.log(self.p90 / self.p50) / Z90
        )

    @property
    def mean(self) -> float:
        if self.bars:
            return sum(self._cut(t) * w for t, w in self.bars) / sum(w for _, w in self.bars)
        return self.p50 * math.exp(self.sigma**2 / 2)

    def draw(self, rng: random.Random) -> int:
        if self.bars:
            (tokens,) = rng.choices([t for t, _ in self.bars], [w for _, w in self.bars])
            return self._cut(tokens)
        if self.sigma == 0.0:
            return self.p50
        length = round(rng.lognormvariate(math.log(self.p50), self.sigma))
        cut = round(TAIL_CUT * (self.p90 or self.p50))
        return max(1, self._cut(min(length, cut)))

    def _cut(self, tokens: int) -> int:
        return tokens if self.limit is None else min(tokens, self.limit)


@dataclass(frozen=True, slots=True)
class Workload:
    isl: int  # median prompt, tokens
    osl: int  # median answer, tokens
    rate: float  # requests per second
    slo: Slo
    # Each stream's longest gap between two tokens, p90 over requests (None: unbounded).
    max_stall_s: float | None = None
    # 90th percentiles of the lengths (None: every request has the median length).
    isl_p90: int | None = None
    osl_p90: int | None = None
    # The longest prompt and answer the model serves (None: no limit).
    max_isl: int | None = None
    max_osl: int | None = None
    # Histograms of the lengths (empty: the median and p90 above describe them).
    isl_bars: tuple[Bar, ...] = ()
    osl_bars: tuple[Bar, ...] = ()

    @property
    def isl_lengths(self) -> Lengths:
        return Lengths(self.isl, self.isl_p90, self.max_isl, self.isl_bars)

    @property
    def osl_lengths(self) -> Lengths:
        return Lengths(self.osl, self.osl_p90, self.max_osl, self.osl_bars)

    @property
    def decode_context(self) -> int:
        """The context a sequence typically decodes at: the median prompt and half the
        median answer."""
        return self.isl + self.osl // 2

    def describe_slo(self) -> str:
        if self.max_stall_s is None:
            return self.slo.describe()
        return f"{self.slo.describe()}, longest gap p90 <= {self.max_stall_s * 1e3:g} ms"


@dataclass(frozen=True, slots=True)
class Limits:
    """What the spec allows: workers per pool, and the GPUs per worker it starts from."""

    max_prefill: int
    max_decode: int
    prefill_tp: int
    decode_tp: int
    # The GPUs per worker the search may use (within a node); empty: the spec's only.
    tensor_parallel_sizes: tuple[int, ...] = ()

    @property
    def sizes(self) -> tuple[int, ...]:
        own = {self.prefill_tp, self.decode_tp}
        return tuple(sorted(own | set(self.tensor_parallel_sizes)))


@dataclass(frozen=True, slots=True)
class Candidate:
    prefill: int
    decode: int
    prefill_tp: int
    decode_tp: int
    # The decode (or aggregated) workers' step budget; None: the spec's.
    max_num_tokens: int | None = None
    # The decode (or aggregated) workers' batch limit; None: the spec's.
    max_batch_size: int | None = None

    @property
    def gpus(self) -> int:
        return self.prefill * self.prefill_tp + self.decode * self.decode_tp

    @property
    def name(self) -> str:
        cap = "" if self.max_batch_size is None else f", batch <= {self.max_batch_size}"
        if self.prefill == 0:
            budget = "" if self.max_num_tokens is None else f", {self.max_num_tokens} tokens/step"
            return f"aggregated, {_workers(self.decode, self.decode_tp)}{budget}{cap}"
        workers = "worker" if self.prefill + self.decode == 1 else "workers"
        return (
            f"{self.prefill} prefill TP{self.prefill_tp} + {self.decode} decode "
            f"TP{self.decode_tp} {workers}{cap}"
        )


def _workers(count: int, tp: int) -> str:
    return f"{count} TP{tp} worker{'' if count == 1 else 's'}"


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
    # How long the decode pool's router counts a request, queued or active (what its
    # autoscaler sizes by): from arrival when the decode worker prefills it too, from the
    # first token when the prefill pool does; averaged over the judged requests.
    mean_decode_pool_seconds: float
    # Set when the run stopped once the SLO was missed for sure: the figures above then
    # cover only the requests finished by then.
    stopped: str | None = None


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

    def shaped(
        self,
        prefill_tp: int,
        decode_tp: int,
        max_num_tokens: int | None,
        max_batch_size: int | None = None,
    ) -> Setup:
        """The same engines at other parallelism (and a decode step budget and batch
        limit)."""
        decode = {**self.decode_options, "tensor_parallel_size": decode_tp}
        if max_num_tokens is not None:
            decode["max_num_tokens"] = max_num_tokens
        if max_batch_size is not None:
            decode["max_batch_size"] = max_batch_size
        prefill = {**self.prefill_options, "tensor_parallel_size": prefill_tp}
        return replace(self, prefill_options=prefill, decode_options=decode)

    def for_candidate(self, candidate: Candidate) -> Deployment:
        c = candidate
        shaped = self.shaped(c.prefill_tp, c.decode_tp, c.max_num_tokens, c.max_batch_size)
        return shaped.deployment(c.prefill, c.decode)


def count_requests(workload: Workload) -> int:
    """Arrivals enough for a steady state: LIFETIMES request lifetimes' worth."""
    lifetime = workload.slo.ttft_p90_s + (workload.osl - 1) * workload.slo.itl_p90_s
    return max(MIN_REQUESTS, math.ceil(workload.rate * lifetime * LIFETIMES))


def generate_arrivals(workload: Workload, count: int, seed: int) -> list[SimRequest]:
    """``count`` Poisson arrivals at ``workload.rate`` (seeded), lengths drawn from the
    workload's distributions (the medians when they have no p90)."""
    rng = random.Random(seed)
    prompts, answers = workload.isl_lengths, workload.osl_lengths
    t, out = 0.0, []
    for _ in range(count):
        t += rng.expovariate(workload.rate)
        out.append(SimRequest(t, prompts.draw(rng), answers.draw(rng)))
    return out


def evaluate(
    candidate: Candidate,
    workload: Workload,
    setup: Setup,
    arrivals: Sequence[SimRequest],
    *,
    stop_early: bool = True,  # False: run to the end whatever, for every figure
) -> Evaluation:
    deployment = setup.for_candidate(candidate)
    # Stop judging a hopeless deployment once the run lasts far past its arrivals.
    horizon = arrivals[-1].arrival * 3 + 60.0
    cutoff = arrivals[-1].arrival * WARMUP_FRACTION
    watch = MissWatch(workload, cutoff, sum(1 for r in arrivals if r.arrival >= cutoff))
    outcomes = ClusterSim(deployment).run_open(
        arrivals, until=horizon, watch=watch if stop_early else None
    )
    judged = [o for o in outcomes if o.arrival >= cutoff]
    unfinished = len(arrivals) - len(outcomes)
    return _summarize(candidate, workload, judged, unfinished, watch.verdict)


@dataclass(slots=True)
class MissWatch:
    """Counts the judged requests over each target while a deployment runs; once more
    of them miss one target than its p90 allows, the deployment misses whatever the
    rest do, and the run stops (most deployments a search tries miss)."""

    workload: Workload
    cutoff: float  # requests arriving earlier are warm-up, not judged
    judged: int  # requests the run will judge if all finish
    ttft_misses: int = 0
    itl_misses: int = 0
    gap_misses: int = 0
    verdict: str | None = None  # why the run stopped early

    def first_token(self, arrival: float, ttft: float) -> bool:
        if arrival >= self.cutoff and ttft > self.workload.slo.ttft_p90_s:
            self.ttft_misses += 1
        return self._decided()

    def finished(self, outcome: Outcome) -> bool:
        if outcome.arrival >= self.cutoff:
            self.itl_misses += outcome.itl > self.workload.slo.itl_p90_s
            bound = self.workload.max_stall_s
            self.gap_misses += bound is not None and max(outcome.gaps, default=0.0) > bound
        return self._decided()

    def _decided(self) -> bool:
        enough = misses_over_p90(self.judged)
        for misses, target in (
            (self.ttft_misses, "TTFT"), (self.itl_misses, "ITL"), (self.gap_misses, "longest gap"),
        ):  # fmt: skip
            if misses >= enough:
                self.verdict = f"{misses} of {self.judged} judged requests over the {target} target"
                return True
        return False


def _summarize(
    candidate: Candidate,
    workload: Workload,
    judged: Sequence[Outcome],
    unfinished: int,
    stopped: str | None = None,
) -> Evaluation:
    if not judged:
        worst = Percentiles(math.inf, math.inf, math.inf)
        return Evaluation(candidate, worst, worst, worst, 0.0, 0.0, 0, False, math.inf, stopped)
    ttft = compute_percentiles([o.ttft for o in judged])
    itl = compute_percentiles([o.itl for o in judged])
    longest_gap = compute_percentiles([max(o.gaps, default=0.0) for o in judged])
    users = sorted(1 / o.itl for o in judged if o.itl > 0)
    meets = (
        stopped is None
        and unfinished == 0
        and ttft.p90 <= workload.slo.ttft_p90_s
        and itl.p90 <= workload.slo.itl_p90_s
        and (workload.max_stall_s is None or longest_gap.p90 <= workload.max_stall_s)
    )
    return Evaluation(
        candidate,
        ttft,
        itl,
        longest_gap,
        workload.rate * workload.osl_lengths.mean / candidate.gpus,
        users[len(users) // 2] if users else 0.0,
        len(judged),
        meets,
        sum(o.end - (o.first_token if o.remote else o.arrival) for o in judged) / len(judged),
        stopped,
    )


@dataclass(frozen=True, slots=True)
class Shape:
    """One way to serve: aggregated workers of one TP size (``prefill_tp`` None), or a
    prefill and a decode TP size, with what their clocks promise at best."""

    prefill_tp: int | None
    decode_tp: int
    max_num_tokens: int | None
    ideal: tuple[IdealPoint, ...]
    best: IdealPoint  # the ideal's most tokens/s/GPU within the ITL target
    prefill_busy: float  # prefill workers the rate keeps busy (disaggregated)
    fewest_gpus: int  # what the best point needs for the workload's tokens/s
    clock_sources: tuple[str, ...]
    # The best point's batch when it is below the engine's limit: each candidate is also
    # tried with its decode workers capped there, which keeps a burst's steps within the
    # ITL target while the excess waits (TTFT pays; AIConfigurator sizes batches so).
    batch_cap: int | None = None

    def candidates(self, gpus: int, limits: Limits) -> list[Candidate]:
        if self.prefill_tp is None:
            tp, workers = self.decode_tp, gpus // self.decode_tp
            if gpus % tp or workers > limits.max_decode:
                return []
            found = [Candidate(0, workers, tp, tp, self.max_num_tokens)]
        else:
            found = _splits(
                gpus, limits, self.prefill_busy, self.best, self.prefill_tp, self.decode_tp
            )
        if self.batch_cap is None:
            return found
        return [v for c in found for v in (c, replace(c, max_batch_size=self.batch_cap))]


def compute_shapes(workload: Workload, setup: Setup, limits: Limits) -> list[Shape]:
    """Every shape that fits the model and can reach the ITL target, most efficient
    first (pure: clocks and capacity only, no simulation)."""
    shapes = []
    # Each engine once, by its options, with its KV pool (None: the weights do not fit).
    configs: dict[str, tuple[SimulatedConfig, KvCapacity] | None] = {}

    def config(options: Mapping[str, object]) -> tuple[SimulatedConfig, KvCapacity] | None:
        key = repr(sorted(options.items()))
        if key not in configs:
            try:
                built = SimulatedConfig.from_options(options)
                configs[key] = built, built.compute_capacity()
            except (SimulatedConfigError, ValueError):
                configs[key] = None
        return configs[key]

    for prefill_tp, decode_tp, budget in _shape_keys(workload, setup, limits):
        shaped = setup.shaped(prefill_tp or decode_tp, decode_tp, budget)
        prefill_built, decode_built = config(shaped.prefill_options), config(shaped.decode_options)
        if prefill_built is None or decode_built is None:
            continue
        (prefill, _), (decode, capacity) = prefill_built, decode_built
        chunk = prefill.options.max_num_tokens if prefill_tp else decode.options.max_num_tokens
        ideal = tuple(
            compute_rate_matched_curve(
                prefill.clock, decode.clock, capacity, isl=workload.isl, osl=workload.osl,
                chunk_tokens=chunk,
            )
        )  # fmt: skip
        best = find_best_within(list(ideal), workload.slo.itl_p90_s)
        if best is None:
            continue
        demand = workload.rate * workload.osl  # output tokens per second
        prefill_s = compute_prefill_seconds(prefill.clock, workload.isl, chunk)
        sources = tuple(dict.fromkeys((prefill.clock.source, decode.clock.source)))
        cap = best.batch if best.batch < decode.options.max_batch_size else None
        shapes.append(
            Shape(
                prefill_tp, decode_tp, budget, ideal, best, workload.rate * prefill_s,
                max(1, math.ceil(demand / best.tokens_per_second_per_gpu)), sources, cap,
            )
        )  # fmt: skip
    shapes.sort(key=lambda s: -s.best.tokens_per_second_per_gpu)
    return shapes


def _shape_keys(
    workload: Workload, setup: Setup, limits: Limits
) -> Iterator[tuple[int | None, int, int | None]]:
    budgets: list[int | None] = [None]
    spec_budget = SimulatedConfig.from_options(setup.decode_options).options.max_num_tokens
    if workload.max_stall_s is not None and spec_budget > SHORT_STEP_TOKENS:
        budgets.append(SHORT_STEP_TOKENS)
    for tp in limits.sizes:
        for budget in budgets:
            yield None, tp, budget
    for prefill_tp in limits.sizes:
        for decode_tp in limits.sizes:
            yield prefill_tp, decode_tp, None


def recommend(
    workload: Workload,
    setup: Setup,
    limits: Limits,
    *,
    requests: int | None = None,  # None: count_requests(workload)
    seed: int = 1,
    progress: Callable[[Evaluation], None] = lambda _: None,
) -> Recommendation:
    shapes = compute_shapes(workload, setup, limits)
    sources = tuple(dict.fromkeys(src for shape in shapes for src in shape.clock_sources))
    if not shapes:
        return _unreachable(workload, setup, limits)
    spec = next(
        (s for s in shapes if (s.prefill_tp, s.decode_tp) == (limits.prefill_tp, limits.decode_tp)),
        shapes[0],
    )
    largest = max(limits.sizes)
    most = (limits.max_prefill + limits.max_decode) * largest
    arrivals = generate_arrivals(workload, requests or count_requests(workload), seed)
    evaluated: list[Evaluation] = []
    for gpus in range(min(s.fewest_gpus for s in shapes), most + 1):
        fitting = [s for s in shapes if s.fewest_gpus <= gpus]
        candidates = [c for s in fitting for c in s.candidates(gpus, limits)]
        fits = [evaluate(c, workload, setup, arrivals) for c in candidates[:CANDIDATES_PER_COUNT]]
        for e in fits:
            progress(e)
        evaluated += fits
        winners = [e for e in fits if e.meets]
        if winners:
            chosen = min(winners, key=lambda e: (e.itl.p90, e.ttft.p90))
            return Recommendation(workload, chosen, tuple(evaluated), spec.ideal, sources)
    return Recommendation(
        workload, None, tuple(evaluated), spec.ideal, sources,
        f"no deployment within the spec's limits ({limits.max_prefill} prefill and "
        f"{limits.max_decode} decode workers) meets the SLO at {workload.rate:g} requests/s",
    )  # fmt: skip


def _unreachable(workload: Workload, setup: Setup, limits: Limits) -> Recommendation:
    """No shape reaches the ITL target: say how fast one sequence decodes at best."""
    alone, sources = math.inf, tuple[str, ...]()
    for tp in limits.sizes:
        try:
            config = SimulatedConfig.from_options(setup.shaped(tp, tp, None).decode_options)
            config.compute_capacity()
        except (SimulatedConfigError, ValueError):
            continue
        context = workload.decode_context
        step = config.clock.step_seconds([context], ())
        if step < alone:
            alone, sources = step, (config.clock.source,)
    return Recommendation(
        workload, None, (), (), sources,
        f"no deployment can: one sequence alone decodes at {alone * 1e3:.1f} ms/token on "
        f"this GPU at best (TP {', '.join(map(str, limits.sizes))}), above the ITL target of "
        f"{workload.slo.itl_p90_s * 1e3:g} ms",
    )  # fmt: skip


def _splits(
    gpus: int,
    limits: Limits,
    prefill_busy: float,
    ideal: IdealPoint,
    prefill_tp: int,
    decode_tp: int,
) -> list[Candidate]:
    """Disaggregated deployments of exactly ``gpus`` GPUs worth running: the splits whose
    prefill share is closest to the rate-matched one (``prefill_busy`` prefill workers
    would be busy all the time; the ideal says how many per decode worker)."""
    splits = []
    for prefill in range(1, limits.max_prefill + 1):
        rest = gpus - prefill * prefill_tp
        if rest <= 0 or rest % decode_tp:
            continue
        decode = rest // decode_tp
        if decode > limits.max_decode or prefill < prefill_busy:
            continue  # a prefill pool busier than 100% only queues
        splits.append(Candidate(prefill, decode, prefill_tp, decode_tp))
    share = ideal.prefill_workers_per_decode_worker
    splits.sort(key=lambda c: abs(c.prefill / c.decode - share))
    return splits[:2]
