"""An InferenceCluster's own plan (pure): ``spec.slo`` and ``spec.workload`` -> ``status.plan``.

``planning.mode: auto`` searches (``recommend``) for the deployment that meets the SLO on
the fewest GPUs; ``check`` simulates the spec's own shape (``evaluate``) and says which
percentile misses. Both plan at the workload's highest rate. The answer is the API's
``PlanStatus``, which the operator stores in status and renders from (``planned_spec``).

``python -m tandem.sim.spec_plan`` reads a :class:`PlanRequest` (JSON: the spec and, for
the reference engine, the step-time table its profiling Job measured) on stdin and writes
its PlanStatus (JSON) on stdout: the operator plans in a process of its own, so a plan's
seconds of CPU never hold its event loop, and one that runs too long can be killed.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tandem.api.base import ApiModel
from tandem.api.v1alpha1 import (
    InferenceClusterSpec,
    PlannedPool,
    PlannedTargets,
    PlanningMode,
    PlanOutcome,
    PlanStatus,
    PredictedLatency,
)
from tandem.engines.simulated import SimulatedConfig, SimulatedConfigError
from tandem.sim.metrics import Slo
from tandem.sim.planner import (
    Candidate,
    Evaluation,
    Setup,
    Workload,
    count_requests,
    evaluate,
    generate_arrivals,
    recommend,
)
from tandem.sim.scaling_targets import (
    Capacity,
    compute_scaling_targets,
    find_capacity,
    find_decode_batch,
)
from tandem.sim.spec_setup import compute_setup

SEED = 1  # the same arrivals for the same spec: a plan is a function of its hash
PRECISION = 5  # decimals of predicted seconds kept in status (10 us)


def compute_workload(spec: InferenceClusterSpec) -> Workload:
    """The planner's workload: the spec's lengths at its highest rate."""
    if spec.slo is None or spec.workload is None:
        raise ValueError("planning needs spec.slo and spec.workload")
    slo, load = spec.slo, spec.workload
    return Workload(
        load.isl,
        load.osl,
        load.requests_per_second.max,
        Slo(slo.ttft_p90_seconds, slo.itl_p90_seconds),
        slo.longest_gap_p90_seconds,
        isl_p90=load.isl_p90,
        osl_p90=load.osl_p90,
        max_isl=spec.model.max_input_tokens,
        max_osl=spec.model.max_output_tokens,
        isl_bars=tuple((b.tokens, b.weight) for b in load.isl_histogram or ()),
        osl_bars=tuple((b.tokens, b.weight) for b in load.osl_histogram or ()),
    )


class PlanRequest(ApiModel):
    """What the planner process reads: a spec, and the text of the step-time table it is
    planned from (a ``tandem.perf-table/v1`` document; the reference engine's)."""

    spec: InferenceClusterSpec
    perf_table: str | None = None


def compute_spec_hash(spec: InferenceClusterSpec, perf_table: str | None = None) -> str:
    """A hash of exactly the spec fields a plan reads (``compute_setup`` and the
    workload; the pools' sizes only in check mode, which simulates them): a changed
    image, pod template or frontend replica count plans nothing again. The engine's
    options are hashed whole, as written, since the planner renders them; a new
    ``perf_table`` (its text) plans again."""
    wire = spec.to_wire()
    pool_keys = ["tensorParallelSize", "maxReplicas", "engineOptions"]
    if spec.planning.mode is PlanningMode.CHECK:
        pool_keys.append("replicas")
    inputs: dict[str, Any] = {
        key: wire.get(key) for key in ("model", "accelerator", "slo", "workload")
    }
    inputs["engine"] = {key: wire["engine"].get(key) for key in ("kind", "options")}
    inputs["mode"] = spec.planning.mode.value
    inputs["disaggregation"] = wire["frontend"]["disaggregation"]
    for role in ("prefill", "decode"):
        inputs[role] = {key: wire[role].get(key) for key in pool_keys}
    if perf_table is not None:  # absent, not null: specs without a table keep their hash
        inputs["perfTable"] = hashlib.sha256(perf_table.encode()).hexdigest()
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def plan_spec(spec: InferenceClusterSpec, perf_table: str | None = None) -> PlanStatus:
    """The plan for ``spec`` (mode check or auto) from the table text ``perf_table``, if
    any; seconds of CPU."""
    if perf_table is None:
        return _plan(spec, None, None)
    # The simulated engines standing in for the workers read their table from a file.
    with tempfile.TemporaryDirectory(prefix="tandem-plan-") as folder:
        path = Path(folder) / "table.json"
        path.write_text(perf_table)
        return _plan(spec, perf_table, str(path))


def _plan(spec: InferenceClusterSpec, perf_table: str | None, path: str | None) -> PlanStatus:
    spec_hash, mode = compute_spec_hash(spec, perf_table), spec.planning.mode
    try:
        workload = compute_workload(spec)
        setup, limits = compute_setup(spec, path)
        if mode is PlanningMode.CHECK:
            own = Candidate(
                spec.prefill.replicas, spec.decode.replicas, limits.prefill_tp, limits.decode_tp
            )
            arrivals = generate_arrivals(workload, count_requests(workload), SEED)
            checked = evaluate(own, workload, setup, arrivals, stop_early=False)
            return _render(spec_hash, mode, workload, setup, checked, _clock_sources(setup, own))
        result = recommend(workload, setup, limits, seed=SEED)
    except (SimulatedConfigError, ValueError) as exc:
        return describe_failure(spec_hash, mode, f"cannot plan: {exc}")
    if result.chosen is None:
        return PlanStatus(
            spec_hash=spec_hash,
            mode=mode,
            outcome=PlanOutcome.MISSED,
            requests_per_second=workload.rate,
            clock_sources=list(result.clock_sources),
            message=result.reason or "no deployment meets the SLO",
        )
    chosen = result.chosen
    return _render(
        spec_hash, mode, workload, setup, chosen, _clock_sources(setup, chosen.candidate)
    )


def describe_failure(spec_hash: str, mode: PlanningMode, message: str) -> PlanStatus:
    """No plan: the planner failed or gave up (``message`` says which and why)."""
    return PlanStatus(spec_hash=spec_hash, mode=mode, outcome=PlanOutcome.FAILED, message=message)


def describe_misses(evaluation: Evaluation, workload: Workload) -> str:
    """Each percentile over its target, e.g. ``ITL p90 7.9 ms > 6 ms``; empty if none."""
    slo = workload.slo
    misses = []
    if evaluation.ttft.p90 > slo.ttft_p90_s:
        misses.append(f"TTFT p90 {evaluation.ttft.p90:.2f} s > {slo.ttft_p90_s:g} s")
    if evaluation.itl.p90 > slo.itl_p90_s:
        misses.append(f"ITL p90 {evaluation.itl.p90 * 1e3:.1f} ms > {slo.itl_p90_s * 1e3:g} ms")
    gap, bound = evaluation.longest_gap.p90, workload.max_stall_s
    if bound is not None and gap > bound:
        misses.append(f"longest gap p90 {gap * 1e3:.0f} ms > {bound * 1e3:g} ms")
    return ", ".join(misses)


def _render(
    spec_hash: str,
    mode: PlanningMode,
    workload: Workload,
    setup: Setup,
    chosen: Evaluation,
    clock_sources: tuple[str, ...],
) -> PlanStatus:
    c = chosen.candidate
    rate = f"at {workload.rate:g} req/s"
    whose = "the spec's shape" if mode is PlanningMode.CHECK else "the planned shape"
    if chosen.meets:
        message = f"{whose} ({c.name}) meets {workload.describe_slo()} {rate}"
    else:
        misses = describe_misses(chosen, workload) or "requests unfinished at the run's end"
        message = f"{misses} {rate} with {whose} ({c.name})"
    finished = chosen.requests > 0  # no judged request: no percentiles to report
    capacity = find_capacity(workload, chosen, setup, SEED)
    targets = compute_scaling_targets(
        capacity,
        Capacity(workload, chosen),
        setup.min_prefill_tokens,
        find_decode_batch(workload, setup, c),
    )
    return PlanStatus(
        spec_hash=spec_hash,
        mode=mode,
        outcome=PlanOutcome.MET if chosen.meets else PlanOutcome.MISSED,
        shape=describe_shape(c),
        layout="aggregated" if c.prefill == 0 else "disaggregated",
        prefill=None
        if c.prefill == 0
        else PlannedPool(workers=c.prefill, tensor_parallel_size=c.prefill_tp),
        decode=PlannedPool(
            workers=c.decode,
            tensor_parallel_size=c.decode_tp,
            max_num_tokens=c.max_num_tokens,
            max_batch_size=c.max_batch_size,
        ),
        gpus=c.gpus,
        requests_per_second=workload.rate,
        predicted=PredictedLatency(
            ttft_p90_seconds=round(chosen.ttft.p90, PRECISION),
            itl_p90_seconds=round(chosen.itl.p90, PRECISION),
            longest_gap_p90_seconds=round(chosen.longest_gap.p90, PRECISION),
        )
        if finished
        else None,
        tokens_per_second_per_gpu=round(chosen.tokens_per_second_per_gpu, 1),
        autoscaling=PlannedTargets(
            prefill_tokens_per_second_per_replica=targets.prefill_tokens_per_second_per_replica,
            decode_active_sequences_per_replica=targets.decode_active_sequences_per_replica,
            max_prefill_wait_seconds=targets.max_prefill_wait_seconds,
        ),
        clock_sources=list(clock_sources),
        message=message,
    )


def describe_shape(c: Candidate) -> str:
    """Short enough for a ``kubectl get`` column: ``1P(TP2)+3D(TP1)``, ``3(TP1) agg``."""
    if c.prefill == 0:
        return f"{c.decode}(TP{c.decode_tp}) agg"
    return f"{c.prefill}P(TP{c.prefill_tp})+{c.decode}D(TP{c.decode_tp})"


def _clock_sources(setup: Setup, candidate: Candidate) -> tuple[str, ...]:
    c = candidate
    shaped = setup.shaped(c.prefill_tp, c.decode_tp, c.max_num_tokens, c.max_batch_size)
    options = (shaped.prefill_options, shaped.decode_options)
    return tuple(dict.fromkeys(SimulatedConfig.from_options(o).clock.source for o in options))


def main() -> None:
    request = PlanRequest.model_validate_json(sys.stdin.read())
    plan = plan_spec(request.spec, request.perf_table)
    sys.stdout.write(plan.model_dump_json(by_alias=True, exclude_none=True))


if __name__ == "__main__":
    main()
