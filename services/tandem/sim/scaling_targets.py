"""The autoscaling targets that hold a planned operating point as the load moves.

``tandem plan`` finds the fewest workers that meet the SLO at one request rate. The
builtin autoscaler sizes each pool from a per-replica target (docs/autoscaling.md), so
the plan's per-worker load at that rate is the target that brings the autoscaler to the
same deployment there and scales it in proportion elsewhere: prompt tokens per second
per prefill worker, and sequences decoding per decode worker (Little's law: arrivals
per second x seconds from first token to last). Proportional is conservative above the
planned rate (a larger pool absorbs bursts better per worker) and optimistic far below
it, where one worker's queueing decides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tandem.sim.planner import Evaluation, Workload


@dataclass(frozen=True, slots=True)
class ScalingTargets:
    """``spec.autoscaling`` and router values for one operating point; None where the
    deployment has no prefill pool (or the prompts are too short to use it)."""

    prefill_tokens_per_second_per_replica: int | None
    decode_active_sequences_per_replica: int
    max_prefill_wait_seconds: float | None


def compute_scaling_targets(
    workload: Workload, chosen: Evaluation, min_prefill_tokens: int
) -> ScalingTargets:
    """Targets from the chosen deployment's per-worker load, rounded down (a target a
    little low scales up a little early)."""
    candidate = chosen.candidate
    disaggregated = candidate.prefill > 0 and workload.isl >= min_prefill_tokens
    prefill_rate = None
    if disaggregated:
        per_worker = workload.rate * workload.isl / candidate.prefill
        prefill_rate = max(1, math.floor(per_worker))
    decoding = workload.rate * chosen.mean_decode_seconds / candidate.decode
    return ScalingTargets(
        prefill_tokens_per_second_per_replica=prefill_rate,
        decode_active_sequences_per_replica=max(1, math.floor(decoding)),
        # A long prompt may wait for the prefill pool as long as the TTFT target allows.
        max_prefill_wait_seconds=workload.slo.ttft_p90_s if disaggregated else None,
    )
