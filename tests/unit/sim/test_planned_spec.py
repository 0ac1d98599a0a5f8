"""``apply_plan``: the planned shape replaces only what the plan decided, and only under
planning.mode auto with a plan that meets the SLO; the result is a valid spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.api.v1alpha1 import (
    InferenceCluster,
    InferenceClusterSpec,
    PlannedPool,
    PlannedTargets,
    PlanningMode,
    PlanningSpec,
    PlanOutcome,
    PlanStatus,
    PoolRole,
    RequestRateSpec,
    SloSpec,
    WorkloadSpec,
)
from tandem.api.validate import check_cel_rules, load_inference_cluster
from tandem.engines.reference.config import ReferenceModelConfig
from tandem.engines.trtllm.config import pool_engine_options
from tandem.sim.planned_spec import apply_cluster_plan, apply_plan

EXAMPLES = Path(__file__).parents[3] / "manifests" / "examples"
EXAMPLE = EXAMPLES / "simulated-gpt-oss-120b-gb200.yaml"
TARGETS = PlannedTargets(
    prefill_tokens_per_second_per_replica=8000,
    decode_active_sequences_per_replica=12,
    max_prefill_wait_seconds=2.0,
)


def _cluster(
    mode: PlanningMode = PlanningMode.AUTO, *, autoscaling: bool = False
) -> InferenceCluster:
    cluster = load_inference_cluster(EXAMPLE)
    spec = cluster.spec
    spec = spec.model_copy(
        update={
            "slo": SloSpec(ttft_p90_seconds=2, itl_p90_seconds=0.01),
            "workload": WorkloadSpec(isl=8192, osl=512, requests_per_second=RequestRateSpec(max=6)),
            "planning": PlanningSpec(mode=mode),
            "autoscaling": spec.autoscaling.model_copy(update={"enabled": autoscaling}),
            # A hand-written GPU count the plan must not inherit.
            "decode": spec.decode.model_copy(update={"gpus_per_worker": 1}),
        }
    )
    return cluster.model_copy(update={"spec": spec})


def _plan(
    prefill: PlannedPool | None,
    decode: PlannedPool,
    *,
    mode: PlanningMode = PlanningMode.AUTO,
    outcome: PlanOutcome = PlanOutcome.MET,
) -> PlanStatus:
    return PlanStatus(
        spec_hash="0123456789abcdef", mode=mode, outcome=outcome, shape="x",
        prefill=prefill, decode=decode, autoscaling=TARGETS, message="planned",
    )  # fmt: skip


DISAGGREGATED = _plan(
    PlannedPool(workers=2, tensor_parallel_size=2), PlannedPool(workers=6, tensor_parallel_size=1)
)
AGGREGATED_DECODE = PlannedPool(
    workers=3, tensor_parallel_size=4, max_num_tokens=2048, max_batch_size=24
)
AGGREGATED = _plan(None, AGGREGATED_DECODE)


def _valid(spec: InferenceClusterSpec) -> None:
    cluster = load_inference_cluster(EXAMPLE).model_copy(update={"spec": spec})
    assert check_cel_rules(cluster) == []


def test_a_disaggregated_plan_sizes_both_pools_within_widened_bounds() -> None:
    spec = _cluster().spec
    planned = apply_plan(spec, DISAGGREGATED)
    p, d = planned.prefill, planned.decode
    assert (p.replicas, p.tensor_parallel_size, p.min_replicas, p.max_replicas) == (2, 2, 0, 4)
    # 6 decode workers > the spec's maxReplicas 4: the bound moves to hold the plan.
    assert (d.replicas, d.tensor_parallel_size, d.min_replicas, d.max_replicas) == (6, 1, 1, 6)
    assert d.gpus_per_worker == 1  # TP unchanged: the hand-written GPU count stays
    assert not {"max_num_tokens", "max_batch_size"} & set(d.engine_options.as_dict())
    # Untouched: everything the plan did not decide.
    assert planned.autoscaling == spec.autoscaling and planned.frontend == spec.frontend
    assert planned.model == spec.model and planned.engine == spec.engine
    _valid(planned)


def test_an_aggregated_plan_removes_the_prefill_pool_and_sets_the_step_budget() -> None:
    planned = apply_plan(_cluster().spec, AGGREGATED)
    p, d = planned.prefill, planned.decode
    assert (p.replicas, p.min_replicas, p.max_replicas) == (0, 0, 0)
    assert (d.replicas, d.tensor_parallel_size, d.gpus_per_worker, d.nodes_per_worker) == (
        3, 4, None, 1,
    )  # fmt: skip
    options = d.engine_options.as_dict()
    assert (options["max_num_tokens"], options["max_batch_size"]) == (2048, 24)
    _valid(planned)


def test_under_autoscaling_an_aggregated_plans_prefill_pool_stands_by_at_zero() -> None:
    spec = _cluster(autoscaling=True).spec
    spec = spec.model_copy(
        update={
            "autoscaling": spec.autoscaling.model_copy(
                update={
                    "prefill": spec.autoscaling.prefill.model_copy(
                        update={"target_tokens_per_second_per_replica": 20000}
                    )
                }
            )
        }
    )
    no_prefill_target = TARGETS.model_copy(update={"prefill_tokens_per_second_per_replica": None})
    planned = apply_plan(spec, AGGREGATED.model_copy(update={"autoscaling": no_prefill_target}))
    p = planned.prefill
    # No worker while the planned workload holds; room to grow, to the spec's bound.
    assert (p.replicas, p.min_replicas, p.max_replicas) == (0, 0, spec.prefill.max_replicas)
    assert spec.prefill.max_replicas > 0
    # The plan has no prefill target for a pool it did not plan: the spec's stays.
    assert planned.autoscaling.prefill.target_tokens_per_second_per_replica == 20000
    assert planned.autoscaling.decode.target_active_sequences_per_replica == 12
    _valid(planned)


def test_a_prefill_pool_that_may_stand_at_zero_makes_long_prompts_wait_for_its_start() -> None:
    spec = _cluster(autoscaling=True).spec  # the prefill pool's minReplicas is 0
    assert spec.prefill.min_replicas == 0 and spec.slo is not None
    for plan in (AGGREGATED, DISAGGREGATED):
        routing = apply_plan(spec, plan).frontend.disaggregation
        assert routing.max_prefill_start_wait_seconds == 5 * spec.slo.ttft_p90_seconds
    # What the user wrote stays; a pool that never reaches zero, or no autoscaling, has no
    # starting worker to wait for.
    written = spec.frontend.model_copy(
        update={
            "disaggregation": spec.frontend.disaggregation.model_copy(
                update={"max_prefill_start_wait_seconds": 30.0}
            )
        }
    )
    kept = apply_plan(spec.model_copy(update={"frontend": written}), AGGREGATED)
    assert kept.frontend.disaggregation.max_prefill_start_wait_seconds == 30.0
    floor = spec.model_copy(update={"prefill": spec.prefill.model_copy(update={"min_replicas": 1})})
    assert (
        apply_plan(floor, DISAGGREGATED).frontend.disaggregation.max_prefill_start_wait_seconds
        is None
    )
    fixed = _cluster(autoscaling=False).spec
    assert apply_plan(fixed, AGGREGATED).frontend == fixed.frontend


def test_under_autoscaling_the_plan_sets_the_targets() -> None:
    planned = apply_plan(_cluster(autoscaling=True).spec, DISAGGREGATED)
    scaling = planned.autoscaling
    assert scaling.prefill.target_tokens_per_second_per_replica == 8000
    assert scaling.decode.target_active_sequences_per_replica == 12
    assert planned.frontend.disaggregation.max_prefill_wait_seconds == 2.0
    _valid(planned)


@pytest.mark.parametrize(
    ("mode", "plan"),
    [
        (PlanningMode.CHECK, _plan(None, PlannedPool(workers=3, tensor_parallel_size=1))),
        (PlanningMode.AUTO, None),  # still planning, nothing before
        (PlanningMode.AUTO, _plan(None, AGGREGATED_DECODE, outcome=PlanOutcome.MISSED)),
        (PlanningMode.AUTO, _plan(None, AGGREGATED_DECODE, mode=PlanningMode.CHECK)),
    ],
    ids=["check-mode", "no-plan", "plan-misses", "a-check-plan"],
)
def test_anything_but_a_met_auto_plan_keeps_the_hand_written_shape(
    mode: PlanningMode, plan: PlanStatus | None
) -> None:
    cluster = _cluster(mode)
    assert apply_plan(cluster.spec, plan) is cluster.spec
    assert apply_cluster_plan(cluster, plan) is cluster


def test_the_cluster_keeps_its_metadata_and_status() -> None:
    cluster = _cluster()
    planned = apply_cluster_plan(cluster, DISAGGREGATED)
    assert planned.metadata == cluster.metadata and planned.status == cluster.status
    assert planned.spec == apply_plan(cluster.spec, DISAGGREGATED)


def test_a_reference_plan_sets_the_step_budget_the_reference_engine_reads() -> None:
    cluster = load_inference_cluster(EXAMPLES / "reference-cpu.yaml")
    spec = cluster.spec.model_copy(
        update={
            "planning": PlanningSpec(mode=PlanningMode.AUTO),
            "slo": SloSpec(ttft_p90_seconds=10, itl_p90_seconds=0.5),
            "workload": WorkloadSpec(isl=256, osl=32, requests_per_second=RequestRateSpec(max=1)),
        }
    )
    decode = PlannedPool(workers=2, tensor_parallel_size=1, max_num_tokens=32, max_batch_size=4)
    planned = apply_plan(spec, _plan(None, decode))
    options = pool_engine_options(planned, PoolRole.DECODE)
    # max_num_tokens is max_batch_tokens there; no batch cap (an unknown option stops it).
    assert options == {"max_batch_tokens": 32}
    assert ReferenceModelConfig.from_options(options).max_batch_tokens == 32
    assert check_cel_rules(cluster.model_copy(update={"spec": planned})) == []
