"""The autoscaling targets a plan writes: 0.8x the per-worker load of the chosen
deployment at the most it serves within the SLO, rounded down, values the spec accepts;
and that most found by simulating the deployment at rising rates."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tandem.api.v1alpha1 import (
    DecodeScalingSpec,
    DisaggregationSpec,
    InferenceClusterSpec,
    PlanningMode,
    PlanningSpec,
    PrefillScalingSpec,
    RequestRateSpec,
    SloSpec,
    WorkloadSpec,
)
from tandem.api.validate import load_inference_cluster
from tandem.engines.simulated import SimulatedConfig
from tandem.sim.metrics import Percentiles, Slo
from tandem.sim.planner import Candidate, Evaluation, Workload, recommend
from tandem.sim.scaling_targets import (
    Capacity,
    ScalingTargets,
    compute_scaling_targets,
    find_capacity,
    find_decode_batch,
)
from tandem.sim.spec_plan import SEED, compute_workload, plan_spec
from tandem.sim.spec_setup import compute_setup

SLO = Slo(ttft_p90_s=2.0, itl_p90_s=0.006)
ANY = Percentiles(0.1, 0.2, 0.3)
EXAMPLE = Path(__file__).parents[3] / "manifests" / "examples" / "simulated-gpt-oss-120b-gb200.yaml"


def chosen(prefill: int, decode: int, pool_seconds: float) -> Evaluation:
    """An evaluation whose requests spend ``pool_seconds`` counted by the decode pool."""
    return Evaluation(
        Candidate(prefill, decode, 1, 1), ANY, ANY, ANY, 1.0, 1.0, 100, True, pool_seconds
    )


@pytest.mark.parametrize(
    ("workload", "evaluation", "expected"),
    [
        # 0.8 x 5 x 32768 / 2 = 65,536 tokens/s per prefill worker; 0.8 x 5 x 4 s / 3 = 5.33.
        pytest.param(
            Workload(32768, 1024, 5.0, SLO),
            chosen(2, 3, 4.0),
            ScalingTargets(65536, 5, 2.0),
            id="disaggregated",
        ),
        # No prefill pool: nothing to target there, and no prefill wait to bound.
        pytest.param(
            Workload(32768, 1024, 5.0, SLO),
            chosen(0, 4, 4.0),
            ScalingTargets(None, 4, None),
            id="aggregated",
        ),
        # Prompts under the disaggregation threshold never reach the prefill pool.
        pytest.param(
            Workload(1024, 1024, 5.0, SLO),
            chosen(1, 3, 4.0),
            ScalingTargets(None, 5, None),
            id="prompts-too-short-for-the-prefill-pool",
        ),
        # 0.8 x 0.1 x 2 s / 1 = 0.16 sequences: a target is at least one.
        pytest.param(
            Workload(4096, 64, 0.1, SLO),
            chosen(1, 1, 2.0),
            ScalingTargets(327, 1, 2.0),
            id="light-load",
        ),
    ],
)
def test_targets_are_0_8x_the_per_worker_load_at_capacity_rounded_down(
    workload: Workload, evaluation: Evaluation, expected: ScalingTargets
) -> None:
    capacity = Capacity(workload, evaluation)
    planned = _at_half_the_rate(capacity)  # well below 0.8x: the headroom decides
    assert compute_scaling_targets(capacity, planned, min_prefill_tokens=2048) == expected


def _at_half_the_rate(capacity: Capacity) -> Capacity:
    workload = dataclasses.replace(capacity.workload, rate=capacity.workload.rate / 2)
    return Capacity(workload, capacity.evaluation)


def test_targets_never_fall_below_the_load_the_plan_was_made_for() -> None:
    # Planned at 1.8 req/s of 32k prompts, met there, missed at 2.25: the capacity search
    # stops at the planned rate. 0.8x would be 47,185 tokens/s, under the 58,982 the one
    # prefill worker was planned to carry; 1.8 x 2 s of decoding = 3.6 sequences, not 2.88.
    planned = Capacity(Workload(32768, 64, 1.8, SLO), chosen(1, 1, 2.0))
    targets = compute_scaling_targets(planned, planned, min_prefill_tokens=2048)
    assert targets == ScalingTargets(58982, 3, 2.0)
    # With room above the plan (capacity at 3 req/s), 0.8x of it is higher: 78,643.
    roomy = Capacity(dataclasses.replace(planned.workload, rate=3.0), planned.evaluation)
    assert compute_scaling_targets(roomy, planned, 2048) == ScalingTargets(78643, 4, 2.0)


def test_the_targets_are_values_the_spec_accepts() -> None:
    capacity = Capacity(Workload(32768, 1024, 5.0, SLO), chosen(2, 3, 4.0))
    targets = compute_scaling_targets(capacity, _at_half_the_rate(capacity), 2048)
    assert targets.prefill_tokens_per_second_per_replica is not None
    prefill = PrefillScalingSpec(
        target_tokens_per_second_per_replica=targets.prefill_tokens_per_second_per_replica
    )
    decode = DecodeScalingSpec(
        target_active_sequences_per_replica=targets.decode_active_sequences_per_replica
    )
    router = DisaggregationSpec(max_prefill_wait_seconds=targets.max_prefill_wait_seconds)
    assert prefill.target_tokens_per_second_per_replica == 65536
    assert decode.target_active_sequences_per_replica == 5
    assert router.max_prefill_wait_seconds == 2.0


def _light_chat_spec(mode: PlanningMode = PlanningMode.AUTO) -> InferenceClusterSpec:
    base = load_inference_cluster(EXAMPLE).spec
    return base.model_copy(
        update={
            "slo": SloSpec(ttft_p90_seconds=2, itl_p90_seconds=0.010),
            "workload": WorkloadSpec(
                isl=1024, osl=256, requests_per_second=RequestRateSpec(min=0.5, max=2)
            ),
            "planning": PlanningSpec(mode=mode),
        }
    )


def test_a_light_plans_capacity_is_found_above_its_rate_and_the_next_step_misses() -> None:
    spec = _light_chat_spec()
    workload = compute_workload(spec)
    setup, limits = compute_setup(spec)
    plan = recommend(workload, setup, limits, seed=SEED).chosen
    assert plan is not None and plan.candidate.gpus == 1
    capacity = find_capacity(workload, plan, setup, SEED)
    assert capacity.evaluation.meets and capacity.evaluation.candidate == plan.candidate
    assert capacity.workload.rate > workload.rate
    assert dataclasses.replace(capacity.workload, rate=workload.rate) == workload
    # A deployment that misses at the planned rate has no capacity above it.
    missed = dataclasses.replace(plan, meets=False)
    assert find_capacity(workload, missed, setup, SEED) == Capacity(workload, missed)


def test_a_one_worker_plans_decode_target_is_above_its_planned_load() -> None:
    """The planned rate's own load as the target sent a second worker up whenever
    arrivals ran above their mean; the target holds the one worker the plan chose."""
    spec = _light_chat_spec()
    plan = plan_spec(spec)
    assert plan.decode is not None and plan.decode.workers == 1
    assert plan.autoscaling is not None and plan.predicted is not None
    workload = compute_workload(spec)
    # Little's law at the planned rate: 2 req/s x (255 tokens x ITL p90) at most.
    planned_load = workload.rate * (workload.osl - 1) * plan.predicted.itl_p90_seconds
    assert plan.autoscaling.decode_active_sequences_per_replica > planned_load


def test_where_prompts_prefill_remotely_the_decode_target_is_at_least_the_itl_batch() -> None:
    # 32k prompts, 64-token answers, planned at its capacity: the decode worker holds
    # 1.8 x 0.2 s = 0.36 sequences, a target of 1; it steps 12 within the ITL: 9.6.
    planned = Capacity(Workload(32768, 64, 1.8, SLO), chosen(1, 1, 0.2))
    targets = compute_scaling_targets(planned, planned, 2048, decode_batch=12)
    assert targets == ScalingTargets(58982, 9, 2.0, decode_from_batch=True)
    # An aggregated worker prefills too, and prompts under the threshold prefill on the
    # decode workers: neither decodes at the bare batch's pace, so neither takes it.
    aggregated = Capacity(planned.workload, chosen(0, 1, 0.2))
    assert (
        compute_scaling_targets(
            aggregated, aggregated, 2048, 12
        ).decode_active_sequences_per_replica
        == 1
    )
    short = Capacity(Workload(1024, 64, 1.8, SLO), chosen(1, 1, 0.2))
    assert not compute_scaling_targets(short, short, 2048, 12).decode_from_batch
    # A load above the batch bound keeps the load's target (1.8 x 20 s = 36 sequences).
    busy = Capacity(planned.workload, chosen(1, 1, 20.0))
    assert compute_scaling_targets(busy, busy, 2048, 12).decode_active_sequences_per_replica == 36


def test_the_decode_batch_is_the_most_sequences_one_step_holds_within_the_itl() -> None:
    spec = _light_chat_spec()
    setup, _ = compute_setup(spec)
    workload = Workload(32768, 64, 1.0, SLO)
    candidate = Candidate(1, 1, 1, 1)
    batch = find_decode_batch(workload, setup, candidate)
    config = SimulatedConfig.from_options(setup.shaped(1, 1, None).decode_options)
    context = 32768 + 32
    assert config.clock.step_seconds([context] * batch, ()) <= SLO.itl_p90_s
    assert config.clock.step_seconds([context] * (batch + 1), ()) > SLO.itl_p90_s
    assert batch > 4  # a GB200 steps several 32k sequences in 6 ms
    capped = dataclasses.replace(candidate, max_batch_size=3)
    assert find_decode_batch(workload, setup, capped) == 3
    # A target no step meets still leaves one sequence per worker.
    strict = dataclasses.replace(workload, slo=Slo(2.0, 1e-6))
    assert find_decode_batch(strict, setup, candidate) == 1
