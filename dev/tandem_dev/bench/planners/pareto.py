"""Pareto curves at 32k (tokens/s/GPU against tokens/s/user) from the simulated cluster,
and where disaggregation gains most interactivity at equal throughput (pure but for the
closed-loop runs).

Each point is one deployment at one concurrency (closed loop, as aiperf and
AIConfigurator's sweeps measure): one aggregated worker of each TP size with a 2k or 8k
chunk or no chunking (the whole prompt in one step), or 1-4 prefill workers (TP1) with
one decode worker of each TP size. Points whose TTFT p90 misses the cell's target are
left out, as AIConfigurator's sweep leaves them out.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tandem.capacity.gpus import gpu_for
from tandem.sim.cluster import ClusterSim, Deployment, SimRequest
from tandem.sim.metrics import compute_percentiles
from tandem.sim.spec_setup import TENSOR_PARALLEL_SIZES
from tandem_dev.bench.goodput.points import Record, compute_steady_throughput
from tandem_dev.bench.planners.cells import Cell
from tandem_dev.bench.planners.tandem_side import MIN_PREFILL_TOKENS, engine_options

CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64, 128)
PREFILL_WORKERS = (1, 2, 3, 4)
# The aggregated step budgets compared: Sarathi-style chunks, and none (chunked prefill
# off: a step as long as the prompt).
AGG_STEPS = (("2k chunks", 2048), ("8k chunks", 8192), ("no chunking", 32768))


@dataclass(frozen=True, slots=True)
class ParetoPoint:
    config: str  # "agg TP1, 8k chunks", "2P TP1 + 1D TP2"
    aggregated: bool
    step: str  # the aggregated step budget's label; "" when disaggregated
    concurrency: int
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    ttft_p90_s: float


def sweep(cell: Cell) -> list[ParetoPoint]:
    """Every configuration at every concurrency, for ``cell``'s model, GPU and lengths
    (its rate and TPOT do not matter: the curve is what a deployment can do)."""
    node = gpu_for(cell.profile).gpus_per_node
    sizes = [tp for tp in TENSOR_PARALLEL_SIZES if tp <= node]
    points: list[ParetoPoint] = []
    for tp, (label, step) in itertools.product(sizes, AGG_STEPS):
        engine = {**engine_options(cell), "tensor_parallel_size": tp, "max_num_tokens": step}
        deployment = Deployment(0, 1, engine, engine, MIN_PREFILL_TOKENS)
        points += _sweep_one(cell, deployment, f"agg TP{tp}, {label}", label, tp)
    for prefill, tp in itertools.product(PREFILL_WORKERS, sizes):
        decode = {**engine_options(cell), "tensor_parallel_size": tp}
        deployment = Deployment(prefill, 1, engine_options(cell), decode, MIN_PREFILL_TOKENS)
        points += _sweep_one(cell, deployment, f"{prefill}P TP1 + 1D TP{tp}", "", prefill + tp)
    return points


def _sweep_one(
    cell: Cell, deployment: Deployment, config: str, step: str, gpus: int
) -> list[ParetoPoint]:
    points = []
    for concurrency in CONCURRENCIES:
        requests = 3 * concurrency + 8  # a steady window after the ramp
        outcomes = ClusterSim(deployment).run_closed(
            lambda _: SimRequest(0.0, cell.isl, cell.osl), concurrency, requests
        )
        if len(outcomes) < requests:
            break  # the worker cannot hold this many sequences at once
        records = [Record(o.arrival, o.first_token, o.end, o.output_tokens) for o in outcomes]
        users = sorted(1 / o.itl for o in outcomes if o.itl > 0)
        points.append(
            ParetoPoint(
                config, deployment.prefill_workers == 0, step, concurrency,
                compute_steady_throughput(records, concurrency) / gpus,
                users[len(users) // 2],
                compute_percentiles([o.ttft for o in outcomes]).p90,
            )
        )  # fmt: skip
    return points


def find_frontier(points: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (tokens/s/user, tokens/s/GPU) points no other point beats on both, by user
    rate ascending."""
    frontier: list[tuple[float, float]] = []
    # Rates within 0.05 tokens/s/user are one rate (the same batch, summed differently).
    for user, gpu in sorted(points, key=lambda p: (-round(p[0], 1), -p[1])):
        if not frontier or gpu > frontier[-1][1]:
            frontier.append((user, gpu))
    return frontier[::-1]


@dataclass(frozen=True, slots=True)
class Gain:
    ratio: float  # disaggregated tokens/s/user over aggregated at equal tokens/s/GPU
    tokens_per_s_per_gpu: float  # where: the disaggregated point's throughput
    disaggregated_user: float
    aggregated_user: float


def find_largest_gain(
    disaggregated: Sequence[tuple[float, float]], aggregated: Sequence[tuple[float, float]]
) -> Gain | None:
    """The largest interactivity ratio over the disaggregated frontier: each point against
    the fastest aggregated point with at least its tokens/s/GPU (no interpolation: an
    aggregated deployment that really reaches that throughput). None when no aggregated
    point reaches any disaggregated point's throughput."""
    best: Gain | None = None
    for user, gpu in find_frontier(disaggregated):
        rivals = [u for u, g in aggregated if g >= gpu]
        if not rivals:
            continue
        gain = Gain(user / max(rivals), gpu, user, max(rivals))
        if best is None or gain.ratio > best.ratio:
            best = gain
    return best
