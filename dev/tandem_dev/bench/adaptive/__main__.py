"""``python -m tandem_dev.bench.adaptive [--seconds S] [--only TRACE] [--row ROW]
[--hardware gb200|b200] [--work DIR]``: every trace replayed against every row on each
hardware; prints the markdown section and writes a plot per hardware to docs/img/ (see the
package docstring). AIConfigurator's recommendations are kept under ``--work``."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tandem.runtime.planning_record import read_record
from tandem.runtime.state import cluster_dir
from tandem.sim.planner import Candidate
from tandem.sim.spec_plan import describe_shape
from tandem.tokenization.harmony import HarmonyTokenizer, load_harmony_tokenizer
from tandem_dev.autoscale_sim.traces import Trace, generate_arrivals
from tandem_dev.bench.adaptive.judge import RowFigures, judge_row
from tandem_dev.bench.adaptive.report import (
    TraceRows,
    plot_attainment,
    plot_name,
    render_report,
)
from tandem_dev.bench.adaptive.rows import (
    AIC_ROWS,
    AUTOSCALING,
    PLANNING,
    ROWS,
    STATIC_PEAK,
    AverageWorkload,
    TraceLoads,
    average_workload,
    build_aic_request,
    choose_aic,
    choose_peak,
    choose_static,
    deploy_time_workload,
    peak_workload,
    render_base,
    render_planned,
    render_static,
)
from tandem_dev.bench.adaptive.traces import build_adaptive_traces
from tandem_dev.bench.autoscale_live.__main__ import build_prompts
from tandem_dev.bench.autoscale_live.replay import replay
from tandem_dev.bench.autoscale_live.report import SEED, SLO
from tandem_dev.bench.planners.aic_client import finish_driver, require_aiconfigurator, start_driver

HARDWARE = ("gb200", "b200")
IMAGES = Path("docs/img")


def render_row(
    row: str,
    name: str,
    loads: TraceLoads,
    profile: str,
    aic: Mapping[str, Any],
) -> tuple[dict[str, Any], str] | str:
    """The row's InferenceCluster and its shape in words, or why the row has none (no
    static deployment of that layout meets the SLO within the budget, or AIConfigurator's
    pick does not fit it). ``aic``: AIConfigurator's ``recommend`` entry for the trace on
    ``profile``."""
    workload = loads.average
    if row == AUTOSCALING:
        return render_base(name, workload, profile), "1P+1D, autoscaled"
    if row == PLANNING:
        return render_planned(name, loads.deployed, profile), "planned"
    if row == STATIC_PEAK:
        workload = loads.peak
        candidate: Candidate | str | None = choose_peak(render_base(name, workload, profile))
    elif row in AIC_ROWS:
        candidate = choose_aic(render_base(name, workload, profile), aic)[row]
    else:
        candidate = choose_static(render_base(name, workload, profile))[row]
    if candidate is None:
        return "none meets the SLO within the budget"
    if isinstance(candidate, str):
        return candidate
    return render_static(name, workload, profile, candidate), describe_shape(candidate)


def run_trace(
    home: Path,
    profile: str,
    trace: Trace,
    rows: Sequence[str],
    tokenizer: HarmonyTokenizer,
    aic: Mapping[str, Any],
) -> TraceRows:
    """Every row of ``trace`` on ``profile``'s workers; ``aic``: AIConfigurator's
    recommendations (``ask_aic``)."""
    arrivals = generate_arrivals(trace, SEED)
    prompts = build_prompts(tokenizer, arrivals)
    seconds = trace.duration_seconds
    loads = TraceLoads(
        average=average_workload(arrivals, seconds),
        deployed=deploy_time_workload(arrivals, seconds),
        peak=peak_workload(arrivals, seconds),
    )
    recommended = aic.get(aic_key(profile, trace.name, loads.average), {})
    results: list[tuple[str, RowFigures | str]] = []
    for index, row in enumerate(rows):
        name = f"adaptive-{profile}-{trace.name}-{index}"
        rendered = render_row(row, name, loads, profile, recommended)
        if isinstance(rendered, str):
            results.append((row, rendered))
            continue
        document, shape = rendered
        run = replay(home, name, document, arrivals, prompts, trace.duration_seconds)
        planning = read_record(cluster_dir(name, home))
        figures = judge_row(run, trace.duration_seconds, SLO, planning, shape)
        print(f"adaptive: {profile} {trace.name} {row}: {figures}", file=sys.stderr, flush=True)
        results.append((row, figures))
    return TraceRows(profile, trace, loads, results)


def aic_key(profile: str, trace: str, workload: AverageWorkload) -> str:
    """A trace's ``recommend`` id: its load in it, so that a changed trace is asked
    again rather than answered from an old result."""
    return f"{profile}/{trace}/{workload.isl_mean}-{workload.osl}-{workload.requests_per_second:g}"


def ask_aic(work: Path, profiles: Sequence[str], traces: Sequence[Trace]) -> dict[str, Any]:
    """AIConfigurator's recommendations for every trace on every hardware, by
    :func:`aic_key` (one driver run: its database loads once; a rerun resumes)."""
    require_aiconfigurator()
    workloads = {
        t.name: average_workload(generate_arrivals(t, SEED), t.duration_seconds) for t in traces
    }
    items = [
        build_aic_request(aic_key(profile, trace, workload), profile, workload)
        for profile in profiles
        for trace, workload in workloads.items()
    ]
    driver = start_driver(work, "recommend", {"recommend": items})
    recommended: dict[str, Any] = finish_driver(work, "recommend", driver)["recommend"]
    return recommended


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tandem_dev.bench.adaptive")
    parser.add_argument("--seconds", type=float, default=240.0, help="each trace's length")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every rate")
    parser.add_argument("--only", action="append", help="trace names to run")
    parser.add_argument("--row", action="append", choices=ROWS, help="rows to run")
    parser.add_argument("--hardware", action="append", choices=HARDWARE, help="GPUs simulated")
    parser.add_argument("--work", type=Path, default=Path("build/bench/adaptive"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    traces = [
        t
        for t in build_adaptive_traces(args.seconds, args.scale)
        if not args.only or t.name in args.only
    ]
    rows = [r for r in ROWS if not args.row or r in args.row]
    profiles = args.hardware or HARDWARE
    tokenizer = load_harmony_tokenizer()
    started = time.monotonic()
    aic = ask_aic(args.work, profiles, traces) if any(r in AIC_ROWS for r in rows) else {}
    results = []
    with tempfile.TemporaryDirectory(prefix="tandem-adaptive-") as tmp:
        for profile in profiles:
            ran = [run_trace(Path(tmp), profile, t, rows, tokenizer, aic) for t in traces]
            plot_attainment(IMAGES / plot_name(profile, args.only), ran)
            results += ran
    print(render_report(results, args.seconds, time.monotonic() - started, args.only))
    return 0


if __name__ == "__main__":
    sys.exit(main())
