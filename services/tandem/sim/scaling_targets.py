"""The autoscaling targets that hold a planned deployment within its SLO as the load moves.

``tandem plan`` finds the fewest workers that meet the SLO at one request rate. The
builtin autoscaler sizes each pool from a per-replica target (docs/autoscaling.md):
prompt tokens per second per prefill worker, and sequences decoding per decode worker.
A target is the per-worker load the chosen deployment carries at the highest rate it
still serves within the SLO (:func:`find_capacity`, Little's law for the decode pool:
arrivals per second x seconds its router counts each, queued or active; where prompts
prefill remotely, at least the batch a decode worker steps within the ITL target,
:func:`find_decode_batch`), times :data:`HEADROOM`: the autoscaler adds a worker before
the pool reaches the load it can no longer serve, and takes one away only where the rest
still serve what is left. Never below the load at the planned rate, which the plan says
its workers carry.

Targets at the planned rate's load instead (the load, not what the workers can carry)
scale a pool out whenever arrivals run a little above their mean: a one-worker plan at
3 req/s with room for 30 asked for a second worker most of the time.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from tandem.engines.simulated import SimulatedConfig
from tandem.sim.planner import (
    Candidate,
    Evaluation,
    Setup,
    Workload,
    count_requests,
    evaluate,
)
from tandem.sim.planner import generate_arrivals as generate_sim_arrivals

# Targets at 0.8x the most a worker carries within the SLO, the share docs/autoscaling.md
# advises for a hand-written prefill target.
HEADROOM = 0.8
# The capacity search: the planned rate doubled while the deployment meets the SLO, at
# most this many times, then the last gap halved; every step is one simulated run of as
# many requests as the rate needs (so the search costs ~12 planned-rate runs at most).
# Past 4x the planned rate the workload has left the plan's envelope: re-planning's job.
MAX_DOUBLINGS = 2
HALVINGS = 2


@dataclass(frozen=True, slots=True)
class Capacity:
    """The chosen deployment at the highest rate found where it meets the SLO."""

    workload: Workload  # the planned workload at that rate
    evaluation: Evaluation  # the deployment's run at that rate


@dataclass(frozen=True, slots=True)
class ScalingTargets:
    """``spec.autoscaling`` and router values for one deployment; None where it has no
    prefill pool (or the prompts are too short to use it)."""

    prefill_tokens_per_second_per_replica: int | None
    decode_active_sequences_per_replica: int
    max_prefill_wait_seconds: float | None
    # The decode target is the batch bound (``find_decode_batch``), not the load.
    decode_from_batch: bool = False


def find_capacity(workload: Workload, chosen: Evaluation, setup: Setup, seed: int) -> Capacity:
    """The highest rate (within ``2**MAX_DOUBLINGS`` x the planned one, to a quarter of
    the last doubling) where ``chosen``'s deployment still meets the SLO; the planned
    point itself when it does not meet there. At most four simulated runs."""
    best = Capacity(workload, chosen)
    if not chosen.meets:
        return best
    missed: float | None = None
    for _ in range(MAX_DOUBLINGS):
        trial = _run_at(best, best.workload.rate * 2, setup, seed)
        if not trial.evaluation.meets:
            missed = trial.workload.rate
            break
        best = trial
    if missed is None:  # still met at the last doubling: that is as far as it looks
        return best
    for _ in range(HALVINGS):
        middle = (best.workload.rate + missed) / 2
        trial = _run_at(best, middle, setup, seed)
        if trial.evaluation.meets:
            best = trial
        else:
            missed = middle
    return best


def find_decode_batch(workload: Workload, setup: Setup, candidate: Candidate) -> int:
    """The most sequences one of ``candidate``'s decode workers steps within the ITL
    target at the workload's typical context (``Workload.decode_context``), and holds in
    its KV pool: what a decode worker carries, whatever the prefill
    pool feeds it (at least 1). Step time grows with the batch, so a bisection finds it."""
    c = candidate
    shaped = setup.shaped(c.prefill_tp, c.decode_tp, c.max_num_tokens, c.max_batch_size)
    config = SimulatedConfig.from_options(shaped.decode_options)
    kv = config.compute_capacity()
    context = workload.decode_context
    most = max(1, (kv.pool_bytes // kv.block_bytes) * kv.tokens_per_block // context)
    if c.max_batch_size is not None:
        most = min(most, c.max_batch_size)
    low, high = 1, most  # low always fits (or nothing does: one is the floor)
    while low < high:
        middle = (low + high + 1) // 2
        if config.clock.step_seconds([context] * middle, ()) <= workload.slo.itl_p90_s:
            low = middle
        else:
            high = middle - 1
    return low


def _run_at(capacity: Capacity, rate: float, setup: Setup, seed: int) -> Capacity:
    workload = dataclasses.replace(capacity.workload, rate=rate)
    arrivals = generate_sim_arrivals(workload, count_requests(workload), seed)
    return Capacity(workload, evaluate(capacity.evaluation.candidate, workload, setup, arrivals))


def compute_scaling_targets(
    capacity: Capacity, planned: Capacity, min_prefill_tokens: int, decode_batch: int = 0
) -> ScalingTargets:
    """:data:`HEADROOM` of the per-worker load at ``capacity``, but never below the load
    at ``planned`` (the deployment at the planned rate), rounded down (a target a little
    low scales up a little early).

    The floor: the planner chose the fewest workers that meet the SLO at the planned
    rate, so the plan itself says they carry it. Where that rate is close to the most
    they carry (a 1P plan for 32k prompts at 1.8 req/s, met there and missed at 2.25),
    0.8x capacity sits below the planned load, and the pool would grow at once under the
    very load it was planned for."""
    workload, at_capacity = capacity.workload, capacity.evaluation
    candidate = at_capacity.candidate
    disaggregated = candidate.prefill > 0 and workload.isl >= min_prefill_tokens
    prefill_rate = None
    if disaggregated:
        _, prompt_tokens = choose_target_basis(compute_prefill_load, capacity, planned)
        prefill_rate = max(1, math.floor(prompt_tokens / candidate.prefill))
    _, sequences = choose_target_basis(compute_decode_load, capacity, planned)
    decoding, from_batch = sequences / candidate.decode, False
    # Where prompts prefill remotely, a decode worker's load at the deployment's capacity
    # is what its prefill pool fed it when that pool gave out: for 32k prompts with
    # 64-token answers a sequence or two of the dozen it steps within a 6 ms ITL, a target
    # of 1 that doubled the pool whenever two answers overlapped. ``decode_batch``
    # (``find_decode_batch``) is its own bound.
    if disaggregated and HEADROOM * decode_batch > decoding:
        decoding, from_batch = HEADROOM * decode_batch, True
    return ScalingTargets(
        prefill_tokens_per_second_per_replica=prefill_rate,
        decode_active_sequences_per_replica=max(1, math.floor(decoding)),
        # A long prompt may wait for the prefill pool as long as the TTFT target allows.
        max_prefill_wait_seconds=workload.slo.ttft_p90_s if disaggregated else None,
        decode_from_batch=from_batch,
    )


def choose_target_basis(
    load: Callable[[Capacity], float], capacity: Capacity, planned: Capacity
) -> tuple[Capacity, float]:
    """The point a pool's target is taken from and the pool-wide load it gives:
    :data:`HEADROOM` of ``load`` at ``capacity``, or the load at ``planned`` where that
    is more."""
    at_capacity = HEADROOM * load(capacity)
    return (capacity, at_capacity) if at_capacity >= load(planned) else (planned, load(planned))


def compute_prefill_load(point: Capacity) -> float:
    """Prompt tokens per second the deployment's prefill pool takes at ``point``."""
    return point.workload.rate * point.workload.isl


def compute_decode_load(point: Capacity) -> float:
    """Sequences the decode pool's router counts at once at ``point``, queued or active
    (Little's law): what the autoscaler compares with the target. On an aggregated
    worker a prompt counts from its arrival, its prefill included; counted from the
    first token, a plan for 1k prompts got a target of 1 and grew on 1 active + 0.4
    queued."""
    return point.workload.rate * point.evaluation.mean_decode_pool_seconds
