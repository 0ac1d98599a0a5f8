"""The autoscaling targets ``tandem plan`` prints: the chosen deployment's per-worker load
at the planned rate, rounded down, and values the spec accepts."""

from __future__ import annotations

import pytest

from tandem.api.v1alpha1 import DecodeScalingSpec, DisaggregationSpec, PrefillScalingSpec
from tandem.sim.metrics import Percentiles, Slo
from tandem.sim.planner import Candidate, Evaluation, Workload
from tandem.sim.scaling_targets import ScalingTargets, compute_scaling_targets

SLO = Slo(ttft_p90_s=2.0, itl_p90_s=0.006)
ANY = Percentiles(0.1, 0.2, 0.3)


def chosen(prefill: int, decode: int, mean_decode_seconds: float) -> Evaluation:
    return Evaluation(
        Candidate(prefill, decode, 1, 1), ANY, ANY, ANY, 1.0, 1.0, 100, True, mean_decode_seconds
    )


@pytest.mark.parametrize(
    ("workload", "evaluation", "expected"),
    [
        # 5 x 32768 / 2 = 81,920 tokens/s per prefill worker; 5 x 4 s / 3 = 6.67 decoding.
        pytest.param(
            Workload(32768, 1024, 5.0, SLO),
            chosen(2, 3, 4.0),
            ScalingTargets(81920, 6, 2.0),
            id="disaggregated",
        ),
        # No prefill pool: nothing to target there, and no prefill wait to bound.
        pytest.param(
            Workload(32768, 1024, 5.0, SLO),
            chosen(0, 4, 4.0),
            ScalingTargets(None, 5, None),
            id="aggregated",
        ),
        # Prompts under the disaggregation threshold never reach the prefill pool.
        pytest.param(
            Workload(1024, 1024, 5.0, SLO),
            chosen(1, 3, 4.0),
            ScalingTargets(None, 6, None),
            id="prompts-too-short-for-the-prefill-pool",
        ),
        # 0.1 x 2 s / 1 = 0.2 sequences: a target is at least one.
        pytest.param(
            Workload(4096, 64, 0.1, SLO),
            chosen(1, 1, 2.0),
            ScalingTargets(409, 1, 2.0),
            id="light-load",
        ),
    ],
)
def test_targets_are_the_per_worker_load_rounded_down(
    workload: Workload, evaluation: Evaluation, expected: ScalingTargets
) -> None:
    assert compute_scaling_targets(workload, evaluation, min_prefill_tokens=2048) == expected


def test_the_targets_are_values_the_spec_accepts() -> None:
    targets = compute_scaling_targets(Workload(32768, 1024, 5.0, SLO), chosen(2, 3, 4.0), 2048)
    assert targets.prefill_tokens_per_second_per_replica is not None
    prefill = PrefillScalingSpec(
        target_tokens_per_second_per_replica=targets.prefill_tokens_per_second_per_replica
    )
    decode = DecodeScalingSpec(
        target_active_sequences_per_replica=targets.decode_active_sequences_per_replica
    )
    router = DisaggregationSpec(max_prefill_wait_seconds=targets.max_prefill_wait_seconds)
    assert prefill.target_tokens_per_second_per_replica == 81920
    assert decode.target_active_sequences_per_replica == 6
    assert router.max_prefill_wait_seconds == 2.0
