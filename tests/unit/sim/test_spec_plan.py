"""An InferenceCluster's own plan: the workload and hash it is made from, the spec's shape
checked (check) or searched (auto), and what status says when nothing can be planned."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tandem.api.v1alpha1 import (
    InferenceCluster,
    InferenceClusterSpec,
    PlanningMode,
    PlanningSpec,
    PlanOutcome,
    RequestRateSpec,
    SloSpec,
    WorkloadSpec,
)
from tandem.api.validate import load_documents, load_inference_cluster
from tandem.sim.metrics import Percentiles, Slo
from tandem.sim.planner import Candidate, Evaluation, Workload
from tandem.sim.spec_plan import (
    compute_spec_hash,
    compute_workload,
    describe_misses,
    describe_shape,
    plan_spec,
)

EXAMPLES = Path(__file__).parents[3] / "manifests" / "examples"


def _spec(
    mode: PlanningMode = PlanningMode.CHECK, *, itl: float = 0.010, rate: float = 2.0
) -> InferenceClusterSpec:
    base = load_inference_cluster(EXAMPLES / "simulated-gpt-oss-120b-gb200.yaml").spec
    return base.model_copy(
        update={
            "slo": SloSpec(ttft_p90_seconds=2, itl_p90_seconds=itl),
            "workload": WorkloadSpec(
                isl=1024, osl=256, requests_per_second=RequestRateSpec(min=0.5, max=rate)
            ),
            "planning": PlanningSpec(mode=mode),
        }
    )


def test_the_workload_is_the_typical_request_at_the_highest_rate() -> None:
    spec = _spec(rate=3)
    # Drawn lengths stop at what the model serves (the frontend refuses longer prompts).
    limits = {"max_isl": spec.model.max_input_tokens, "max_osl": spec.model.max_output_tokens}
    assert compute_workload(spec) == Workload(1024, 256, 3.0, Slo(2, 0.010), None, **limits)
    with pytest.raises(ValueError, match=r"spec\.slo and spec\.workload"):
        compute_workload(spec.model_copy(update={"slo": None}))


def test_the_hash_covers_what_a_plan_reads_and_nothing_else() -> None:
    spec = _spec(PlanningMode.AUTO)
    same = spec.model_copy(
        update={
            "engine": spec.engine.model_copy(update={"image": "registry.example/other:1"}),
            "frontend": spec.frontend.model_copy(update={"replicas": 3}),
            # auto searches worker counts: the hand-written count is no input.
            "decode": spec.decode.model_copy(update={"replicas": 2}),
        }
    )
    assert compute_spec_hash(same) == compute_spec_hash(spec)
    assert compute_spec_hash(_spec(PlanningMode.AUTO, rate=3)) != compute_spec_hash(spec)
    assert compute_spec_hash(_spec(PlanningMode.CHECK)) != compute_spec_hash(spec)
    # check simulates the hand-written count: it is an input there.
    check = _spec(PlanningMode.CHECK)
    resized = check.model_copy(update={"decode": check.decode.model_copy(update={"replicas": 2})})
    assert compute_spec_hash(resized) != compute_spec_hash(check)


def _evaluation(ttft: float, itl: float, gap: float) -> Evaluation:
    def p(v: float) -> Percentiles:
        return Percentiles(v, v, v)

    return Evaluation(Candidate(1, 1, 1, 1), p(ttft), p(itl), p(gap), 0.0, 0.0, 100, False, 1.0)


@pytest.mark.parametrize(
    ("ttft", "itl", "gap", "expected"),
    [
        (0.5, 0.0079, 0.02, "ITL p90 7.9 ms > 6 ms"),
        (3.2, 0.005, 0.02, "TTFT p90 3.20 s > 2 s"),
        (0.5, 0.005, 0.140, "longest gap p90 140 ms > 30 ms"),
        (3.2, 0.0079, 0.140, "TTFT p90 3.20 s > 2 s, ITL p90 7.9 ms > 6 ms, longest gap p90 "
         "140 ms > 30 ms"),
        (0.5, 0.005, 0.02, ""),
    ],
)  # fmt: skip
def test_each_percentile_over_its_target_is_named(
    ttft: float, itl: float, gap: float, expected: str
) -> None:
    workload = Workload(1024, 256, 2.0, Slo(2, 0.006), max_stall_s=0.030)
    assert describe_misses(_evaluation(ttft, itl, gap), workload) == expected


@pytest.mark.parametrize(
    ("candidate", "shape"),
    [(Candidate(0, 3, 1, 1), "3(TP1) agg"), (Candidate(1, 3, 2, 1), "1P(TP2)+3D(TP1)")],
)
def test_shapes_fit_a_column(candidate: Candidate, shape: str) -> None:
    assert describe_shape(candidate) == shape


def test_check_predicts_the_spec_own_shape_and_names_the_miss() -> None:
    met = plan_spec(_spec(PlanningMode.CHECK))
    assert met.outcome is PlanOutcome.MET and met.shape == "1P(TP1)+1D(TP1)"
    assert met.spec_hash == compute_spec_hash(_spec(PlanningMode.CHECK))
    assert met.predicted is not None and met.predicted.itl_p90_seconds <= 0.010
    assert met.gpus == 2 and met.clock_sources
    # An ITL target below what this shape streams at: the same prediction, a miss.
    tight = met.predicted.itl_p90_seconds / 2
    missed = plan_spec(_spec(PlanningMode.CHECK, itl=tight))
    assert missed.outcome is PlanOutcome.MISSED
    assert missed.predicted == met.predicted
    assert missed.message.startswith(
        f"ITL p90 {met.predicted.itl_p90_seconds * 1e3:.1f} ms > {tight * 1e3:g} ms at 2 req/s "
        "with the spec's shape (1 prefill TP1 + 1 decode TP1 workers)"
    )


def test_auto_plans_the_fewest_gpus_and_their_targets() -> None:
    plan = plan_spec(_spec(PlanningMode.AUTO))
    assert plan.outcome is PlanOutcome.MET
    # A light load: one aggregated worker (tests/unit/sim/test_planner.py explains why).
    assert (plan.shape, plan.layout, plan.prefill, plan.gpus) == (
        "1(TP1) agg",
        "aggregated",
        None,
        1,
    )
    assert plan.decode is not None and plan.decode.workers == 1
    assert (
        plan.autoscaling is not None and plan.autoscaling.decode_active_sequences_per_replica >= 1
    )
    assert plan.tokens_per_second_per_gpu == pytest.approx(2 * 256)


def test_no_gpu_meets_an_impossible_itl() -> None:
    plan = plan_spec(_spec(PlanningMode.AUTO, itl=0.0001))
    assert plan.outcome is PlanOutcome.MISSED and plan.shape is None
    assert "no deployment can" in plan.message


def test_a_spec_the_planner_cannot_read_fails_with_the_reason() -> None:
    spec = load_inference_cluster(EXAMPLES / "reference-cpu.yaml").spec.model_copy(
        update={
            "slo": SloSpec(ttft_p90_seconds=2, itl_p90_seconds=0.01),
            "workload": WorkloadSpec(isl=64, osl=16, requests_per_second=RequestRateSpec(max=1)),
            "planning": PlanningSpec(mode=PlanningMode.CHECK),
        }
    )
    plan = plan_spec(spec)
    assert plan.outcome is PlanOutcome.FAILED
    # The operator has no table for a reference engine: the reason says how to make one.
    assert plan.message.startswith("cannot plan: engine.kind: the reference engine has no ")
    assert "`tandem profile -f FILE -o table.json`" in plan.message
    assert plan.spec_hash == compute_spec_hash(spec) and plan.shape is None


def test_the_operator_guide_example_is_valid_and_plans() -> None:
    text = (Path(__file__).parents[3] / "docs" / "operator.md").read_text()
    section = text.split("## Planning from an SLO", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    (cluster,) = load_documents(block, "docs/operator.md")
    assert isinstance(cluster, InferenceCluster)
    assert cluster.spec.planning.mode is PlanningMode.AUTO
    assert plan_spec(cluster.spec).outcome is PlanOutcome.MET
    # The histogram fragment after it: a workload the same cluster plans for.
    fragment = section.split("```yaml\n", 2)[2].split("```", 1)[0]
    workload = WorkloadSpec.model_validate(yaml.safe_load(fragment)["workload"])
    assert [(b.tokens, b.weight) for b in workload.isl_histogram or []] == [(1024, 2), (32768, 1)]
    mixed = cluster.spec.model_copy(update={"workload": workload})
    assert plan_spec(mixed).outcome is PlanOutcome.MET


# A table `tandem profile` measured (SmolLM2 on two cores).
TABLE = (Path(__file__).parents[2] / "data" / "perf-table-smollm2-cpu.json").read_text()


def reference_spec(mode: PlanningMode = PlanningMode.AUTO) -> InferenceClusterSpec:
    return load_inference_cluster(EXAMPLES / "reference-cpu.yaml").spec.model_copy(
        update={
            "slo": SloSpec(ttft_p90_seconds=10, itl_p90_seconds=0.5),
            "workload": WorkloadSpec(isl=256, osl=32, requests_per_second=RequestRateSpec(max=0.2)),
            "planning": PlanningSpec(mode=mode),
        }
    )


def test_a_reference_spec_plans_from_the_table_it_is_handed() -> None:
    spec = reference_spec()
    plan = plan_spec(spec, TABLE)
    assert plan.outcome is PlanOutcome.MET, plan.message
    assert plan.spec_hash == compute_spec_hash(spec, TABLE)
    assert [s.split(":")[0] for s in plan.clock_sources] == ["table"]
    # Without one it is refused, saying how to measure one.
    unplanned = plan_spec(spec)
    assert unplanned.outcome is PlanOutcome.FAILED and "tandem profile" in unplanned.message


def test_the_hash_covers_the_table_and_a_spec_without_one_keeps_its_hash() -> None:
    spec = reference_spec()
    remeasured = TABLE.replace('"prefill": [', '"prefill": [\n    [64, 0.1],', 1)
    assert remeasured != TABLE
    hashes = {compute_spec_hash(spec), compute_spec_hash(spec, TABLE),
              compute_spec_hash(spec, remeasured)}  # fmt: skip
    assert len(hashes) == 3
    assert compute_spec_hash(_spec(), None) == compute_spec_hash(_spec())
