"""``tandem plan -f FILE --isl N --osl N --rate R --ttft-p90 S --itl-p90-ms MS
[--isl-p90 N] [--osl-p90 N] [--max-stall-ms MS] [--perf-table FILE]``: the deployment
that meets the SLO on the fewest GPUs, with the numbers behind it.

Exit codes: 0 a deployment meets the SLO, 1 none can (the message says why), 2 invalid
input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tandem.api.v1alpha1 import InferenceCluster
from tandem.perf.table import PerfTableError
from tandem.sim.metrics import Slo
from tandem.sim.plan_document import render_plan_document
from tandem.sim.planner import Evaluation, Lengths, Recommendation, Workload, recommend
from tandem.sim.plot import PlotUnavailableError, plot_recommendation
from tandem.sim.scaling_targets import (
    HEADROOM,
    Capacity,
    choose_target_basis,
    compute_decode_load,
    compute_prefill_load,
    compute_scaling_targets,
    find_capacity,
    find_decode_batch,
)
from tandem.sim.spec_setup import compute_setup

EXIT_CANNOT = 1
EXIT_INVALID = 2
WORKLOAD_FLAGS = ("isl", "osl", "rate", "ttft_p90", "itl_p90_ms")


def add_workload_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "workload (all five together: recommend a deployment instead of checking the spec's)"
    )
    group.add_argument("--isl", type=positive_int, help="prompt tokens per request (median)")
    group.add_argument("--osl", type=positive_int, help="answer tokens per request (median)")
    group.add_argument(
        "--isl-p90",
        type=positive_int,
        help="optional: the prompts' 90th percentile; lengths are then drawn from the "
        "log-normal through the median and it",
    )
    group.add_argument("--osl-p90", type=positive_int, help="optional: the answers' p90, alike")
    group.add_argument("--rate", type=positive_float, help="requests per second")
    group.add_argument("--ttft-p90", type=positive_float, help="TTFT p90 target, seconds")
    group.add_argument("--itl-p90-ms", type=positive_float, help="ITL p90 target, milliseconds")
    group.add_argument(
        "--max-stall-ms",
        type=positive_float,
        help="optional: the longest wait between two tokens that 90%% of streams may see, "
        "milliseconds (another prompt's prefill chunk on the same worker is one)",
    )
    group.add_argument(
        "--perf-table",
        metavar="FILE",
        help="step times measured by `tandem profile` (tandem.perf-table/v1): what a "
        "reference spec on cpu plans from; a GPU spec's steps then take them too",
    )
    group.add_argument("--plot", type=Path, help="write the options' Pareto chart here (PNG)")
    group.add_argument(
        "--output",
        choices=("text", "json"),
        default="text",
        help="json: one document (tandem.plan/v1, docs/gpu-deployment.md) instead of text",
    )
    group.add_argument(
        "--requests",
        type=positive_int,
        help="simulated requests per candidate (default: enough arrivals to span five "
        "request lifetimes at the SLO's targets, at least 150)",
    )


def wants_recommendation(args: argparse.Namespace) -> bool:
    optional = ("max_stall_ms", "perf_table", "isl_p90", "osl_p90")
    return any(getattr(args, flag) is not None for flag in (*WORKLOAD_FLAGS, *optional))


def cmd_recommend(args: argparse.Namespace, source: str, cluster: InferenceCluster) -> int:
    missing = [f"--{f.replace('_', '-')}" for f in WORKLOAD_FLAGS if getattr(args, f) is None]
    if missing:
        print(f"error: a workload needs {', '.join(missing)} too", file=sys.stderr)
        return EXIT_INVALID
    try:
        setup, limits = compute_setup(cluster.spec, args.perf_table)
    except PerfTableError as exc:
        print(f"error: --perf-table: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except ValueError as exc:
        print(f"error: {source}: spec.{exc}", file=sys.stderr)
        return EXIT_INVALID
    for flag, median in (("isl", args.isl), ("osl", args.osl)):
        p90 = getattr(args, f"{flag}_p90")
        if p90 is not None and p90 < median:
            print(f"error: --{flag}-p90 {p90} is below --{flag} {median}", file=sys.stderr)
            return EXIT_INVALID
    stall = None if args.max_stall_ms is None else args.max_stall_ms / 1e3
    slo = Slo(args.ttft_p90, args.itl_p90_ms / 1e3)
    workload = Workload(
        args.isl, args.osl, args.rate, slo, stall, isl_p90=args.isl_p90, osl_p90=args.osl_p90
    )
    as_json = args.output == "json"

    def say(line: str) -> None:
        if not as_json:  # in JSON mode stdout carries the document alone
            print(line, flush=True)

    spec = cluster.spec
    say(
        f"{cluster.metadata.name}: {spec.model.name} on {spec.accelerator.profile.value}, "
        f"prefill TP{limits.prefill_tp} (<= {limits.max_prefill} workers), decode "
        f"TP{limits.decode_tp} (<= {limits.max_decode} workers)\n"
        f"workload: ISL {_lengths(workload.isl_lengths)}, OSL {_lengths(workload.osl_lengths)}, "
        f"{workload.rate:g} requests/s; "
        f"SLO {workload.describe_slo()}"
    )
    result = recommend(
        workload, setup, limits, requests=args.requests,
        progress=lambda e: say(f"  tried {_row(e)}"),
    )  # fmt: skip
    if as_json:
        print(json.dumps(render_plan_document(result, setup), indent=2))
    else:
        capacity, batch = None, 0
        if result.chosen is not None:
            say("finding the load the recommended deployment carries within the SLO ...")
            capacity = find_capacity(workload, result.chosen, setup, seed=1)
            batch = find_decode_batch(workload, setup, result.chosen.candidate)
        print(format_recommendation(result, capacity, setup.min_prefill_tokens, batch))
        for clock in result.clock_sources:
            print(f"step times: {clock}")
    if args.plot is not None:
        try:
            path = plot_recommendation(result, args.plot, _title(cluster, workload))
        except PlotUnavailableError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_INVALID
        print(f"wrote {path}", file=sys.stderr if as_json else sys.stdout)
    return 0 if result.chosen is not None else EXIT_CANNOT


def format_recommendation(
    result: Recommendation,
    capacity: Capacity | None,
    min_prefill_tokens: int,
    decode_batch: int,
) -> str:
    """The recommendation in words; its autoscaling targets from ``capacity``, the chosen
    deployment's :func:`find_capacity` (required when something was chosen), and
    ``decode_batch``, its :func:`find_decode_batch`."""
    chosen = result.chosen
    if chosen is None or capacity is None:
        lines = [f"CANNOT MEET THE SLO: {result.reason}"]
        closest = _closest(result.evaluated)
        if closest is not None:
            lines.append(f"  closest: {_row(closest)}")
        return "\n".join(lines)
    c = chosen.candidate
    split = "" if c.prefill == 0 else f", P:D = {c.prefill}:{c.decode}"
    return "\n".join(
        [
            f"recommended: {c.name}{split}, {_counted(c.gpus, 'GPU')}",
            f"  TTFT p50/p90/p99 {chosen.ttft.p50:.2f} / {chosen.ttft.p90:.2f} / "
            f"{chosen.ttft.p99:.2f} s; ITL p50/p90/p99 {chosen.itl.p50 * 1e3:.1f} / "
            f"{chosen.itl.p90 * 1e3:.1f} / {chosen.itl.p99 * 1e3:.1f} ms",
            f"  each stream's longest gap between tokens p50/p90/p99 {_gaps(chosen)} ms",
            f"  {chosen.tokens_per_second_per_gpu:,.0f} tokens/s/GPU, "
            f"{chosen.tokens_per_second_per_user:.0f} tokens/s/user (median), "
            f"{chosen.requests} simulated requests judged",
            f"  {_counted(len(result.evaluated), 'deployment')} simulated; none with fewer GPUs "
            "meets the SLO",
            *_format_targets(
                Capacity(result.workload, chosen), capacity, min_prefill_tokens, decode_batch
            ),
        ]
    )


def _format_targets(
    planned: Capacity, capacity: Capacity, min_prefill_tokens: int, decode_batch: int
) -> list[str]:
    """The spec values that keep the autoscaler within the SLO (``scaling_targets``),
    each with the load it was taken from."""
    targets = compute_scaling_targets(capacity, planned, min_prefill_tokens, decode_batch)
    c = capacity.evaluation.candidate
    lines = ["  autoscaling targets (spec):"]
    if targets.prefill_tokens_per_second_per_replica is not None:
        point, _ = choose_target_basis(compute_prefill_load, capacity, planned)
        lines.append(
            f"    autoscaling.prefill.targetTokensPerSecondPerReplica: "
            f"{targets.prefill_tokens_per_second_per_replica}  # {_at(point, planned, capacity)} x "
            f"{point.workload.isl} tokens / {_workers(c.prefill, 'prefill')}"
        )
    point, _ = choose_target_basis(compute_decode_load, capacity, planned)
    if targets.decode_from_batch:
        basis = (
            f"{HEADROOM:g} x {decode_batch} sequences a decode worker steps within the ITL "
            f"target at {planned.workload.decode_context:,} tokens of context"
        )
    else:
        basis = (
            f"{_at(point, planned, capacity)} x {point.evaluation.mean_decode_pool_seconds:.2f}"
            f" s queued or decoding / {_workers(c.decode, 'decode')}"
        )
    lines.append(
        f"    autoscaling.decode.targetActiveSequencesPerReplica: "
        f"{targets.decode_active_sequences_per_replica}  # {basis}"
    )
    if targets.max_prefill_wait_seconds is not None:
        lines.append(
            f"    frontend.disaggregation.maxPrefillWaitSeconds: "
            f"{targets.max_prefill_wait_seconds:g}  # the TTFT target"
        )
    return lines


def _at(point: Capacity, planned: Capacity, capacity: Capacity) -> str:
    rate = point.workload.rate
    if point is planned and point is not capacity:
        return f"{rate:g} req/s (the planned rate: {HEADROOM:g}x the most it serves is less)"
    return (
        f"{HEADROOM:g} x {rate:g} req/s (the most it serves within the SLO, "
        f"{rate / planned.workload.rate:.2g}x the planned rate)"
    )


def _workers(count: int, pool: str) -> str:
    return _counted(count, f"{pool} worker")


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _row(e: Evaluation) -> str:
    name = f"{e.candidate.name} ({_counted(e.candidate.gpus, 'GPU')})"
    if e.stopped is not None:
        return f"{name}: misses, {e.stopped} (the run stopped there)"
    verdict = "meets" if e.meets else "misses"
    return (
        f"{name}: TTFT p90 {e.ttft.p90:.2f} s, "
        f"ITL p90 {e.itl.p90 * 1e3:.1f} ms, longest gap p90 {e.longest_gap.p90 * 1e3:.0f} ms "
        f"-> {verdict}"
    )


def _gaps(e: Evaluation) -> str:
    g = e.longest_gap
    return f"{g.p50 * 1e3:.0f} / {g.p90 * 1e3:.0f} / {g.p99 * 1e3:.0f}"


def _closest(evaluated: tuple[Evaluation, ...]) -> Evaluation | None:
    if not evaluated:
        return None
    # A run stopped early has figures for its first requests only: complete runs first.
    return min(evaluated, key=lambda e: (e.stopped is not None, e.itl.p90, e.ttft.p90))


def _title(cluster: InferenceCluster, workload: Workload) -> str:
    return (
        f"{cluster.spec.model.name} on {cluster.spec.accelerator.profile.value}: ISL "
        f"{workload.isl}, OSL {workload.osl}, {workload.rate:g} req/s"
    )


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def _lengths(lengths: Lengths) -> str:
    """``1024`` or ``1024 (p90 4096)``."""
    return str(lengths.p50) if lengths.p90 is None else f"{lengths.p50} (p90 {lengths.p90})"
