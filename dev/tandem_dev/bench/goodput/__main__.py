"""``python -m tandem_dev.bench.goodput [--quick]``: the goodput section of docs/benchmarks.md.

Prints markdown on stdout and writes the Pareto plots to docs/img/. Order: the clock's
calibration, how fast the real stack can run the clock before its plumbing shows
(fidelity), then per profile and ISL the virtual-time sweep of every split, aiperf's
measurements of agg and the best disaggregated split around their modelled goodput, the
goodput table with the targets, every point, and the plots.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tandem.api.v1alpha1 import AcceleratorProfile
from tandem.capacity import GPT_OSS_120B, KvDtype, gpu_for
from tandem.perf.clock import build_clock
from tandem.perf.hardware import performance_for
from tandem.perf.ideal import IdealPoint, compute_rate_matched_curve
from tandem.perf.model import PerfModel, compute_kv_capacity
from tandem.sim.metrics import Slo
from tandem_dev.bench.goodput import grid
from tandem_dev.bench.goodput.aiperf import AiperfRun, parse_export, run_aiperf
from tandem_dev.bench.goodput.measure import Workspace, measure
from tandem_dev.bench.goodput.modelled import simulate_point
from tandem_dev.bench.goodput.points import Point, Split, find_goodput
from tandem_dev.bench.goodput.report import (
    plot_pareto,
    render_goodput,
    render_points,
    render_sensitivity,
)
from tandem_dev.bench.goodput.stack import read_pacing, render_cluster, run_cluster
from tandem_dev.docgen.calibration import render_table

IMAGES = Path("docs/img")
FIDELITY_SPEEDUPS = (0.1, 0.25, 0.5, 1.0)
FIDELITY_CASE = ("gb200", 1024, Split(0, 4), 8)

log = logging.getLogger("tandem_dev.bench.goodput")


def ideal_curve(profile: str, isl: int) -> list[IdealPoint]:
    accelerator = AcceleratorProfile(profile)
    perf = PerfModel(GPT_OSS_120B, performance_for(accelerator), 1, KvDtype.FP8)
    capacity = compute_kv_capacity(perf, gpu_for(accelerator))
    clock = build_clock(perf, accelerator)  # as the simulated engines price their steps
    return compute_rate_matched_curve(clock, clock, capacity, isl=isl, osl=grid.OSL)


def model_sweep(profile: str, isl: int, splits: Sequence[Split]) -> list[Point]:
    return [
        simulate_point(
            profile, isl, grid.OSL, split, c, grid.count_requests(c), grid.RAMP_MODELLED_S
        )
        for split in splits
        for c in grid.MODEL_CONCURRENCY
    ]


def choose_measured(model: Sequence[Point], split: Split, slo: Slo) -> list[int]:
    """The concurrency of the split's modelled goodput and the one below it (the model
    sits at the SLO's edge there, so the plumbing may push the measurement over); the
    lowest one when none meets the SLO."""
    best = find_goodput([p for p in model if p.split == split], slo)
    levels = list(grid.MODEL_CONCURRENCY)
    at = levels.index(best.concurrency) if best is not None else 0
    return levels[max(0, at - 1) : at + 1]


def fidelity(ws: Workspace) -> str:
    profile, isl, split, c = FIDELITY_CASE
    requests = grid.count_requests(c)
    model = simulate_point(profile, isl, grid.OSL, split, c, requests, grid.RAMP_MODELLED_S)
    lines = [
        f"Same workload ({profile}, ISL {isl}, OSL {grid.OSL}, {split.name}, concurrency {c}, "
        f"{requests} requests) through the real stack at several speed-ups, against the "
        "virtual-time run of the same engines. Wall times x speed-up = modelled time; "
        "'plumbing lag' is the wall time the engines waited for the event loop or overran "
        "their modelled step, over the wall time their modelled work needed.",
        "",
        "| speed-up | wall s | output tokens per wall s | TTFT p50 s (model) | ITL p50 ms (model) "
        "| tok/s/GPU (model) | plumbing lag |",
        "|---:|---:|---:|---|---|---|---:|",
    ]
    for speedup in FIDELITY_SPEEDUPS:
        name = f"gp-fidelity-{speedup:g}".replace(".", "p")
        started = time.monotonic()
        try:
            with run_cluster(ws.home, name, render_cluster(name, profile, split, speedup)) as ep:
                run = AiperfRun(ep.removesuffix("/v1"), ws.prompts[isl], ws.tokenizer, c,
                                requests, grid.RAMP_MODELLED_S / speedup, ws.artifacts(),
                                max(120.0, 240.0 / speedup))  # fmt: skip
                data, records = run_aiperf(run)
                pacing = read_pacing(ws.home, name)
            p = parse_export(data, records, profile=profile, isl=isl, osl=grid.OSL, split=split,
                             concurrency=c, speedup=speedup)  # fmt: skip
        except (RuntimeError, OSError, ValueError, KeyError) as exc:
            lines.append(f"| {speedup:g} | failed: {str(exc).splitlines()[0]} | | | | | |")
            continue
        lag = max((q.lag for q in pacing.values()), default=0.0)
        wall_rate = p.tokens_per_second * speedup
        lines.append(
            f"| {speedup:g} | {time.monotonic() - started:.0f} | {wall_rate:,.0f} | "
            f"{p.ttft.p50:.3f} ({model.ttft.p50:.3f}) | {p.itl.p50 * 1e3:.2f} "
            f"({model.itl.p50 * 1e3:.2f}) | {p.tokens_per_second_per_gpu:,.0f} "
            f"({model.tokens_per_second_per_gpu:,.0f}) | {lag:.0%} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tandem_dev.bench.goodput")
    parser.add_argument("--quick", action="store_true", help="gb200, 1k and 32k, agg vs 2P2D")
    parser.add_argument("--model-only", action="store_true", help="no aiperf runs")
    parser.add_argument("--no-fidelity", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s")
    logging.getLogger("tandem.engines.simulated.engine").setLevel(logging.WARNING)
    chosen = grid.QUICK if args.quick else grid.FULL
    out = [
        "Simulated engines (docs/simulated-engine.md): gpt-oss-120b, TP1 workers, KV fp8, "
        f"{grid.GPUS} GPUs per deployment (aggregated: {grid.GPUS} workers that prefill and "
        f"decode; xPyD: x prefill + y decode workers), OSL {grid.OSL}, prompts of >= "
        "2048 tokens disaggregated (shorter ones prefill on their decode worker). "
        "aiperf 0.13 drives the real stack (`tandem up`); 'model' is the same engines and "
        "router policy in virtual time (`tandem.sim`); 'ideal' the rate-matched bound from "
        "the same performance model (`tandem.perf.ideal`). Goodput: the most tokens/s/GPU "
        "of a split whose TTFT p90 and ITL p90 (aiperf's per-request ITL) meet the SLO.",
        "",
        "### Calibration of the clock",
        "",
        render_table(),
    ]
    with tempfile.TemporaryDirectory(prefix="tandem-goodput-") as tmp:
        ws = Workspace(Path(tmp), chosen.isls)
        if chosen.measured and not args.model_only and not args.no_fidelity:
            out += ["", "### Where the plumbing sets the pace", "", fidelity(ws)]
        rows = []
        every: list[Point] = []
        for profile in chosen.profiles:
            for isl in chosen.isls:
                slo = grid.SLOS[isl]
                log.info("model sweep %s ISL %d", profile, isl)
                model = model_sweep(profile, isl, chosen.splits)
                measured: list[Point] = []
                if (profile, isl) in chosen.measured and not args.model_only:
                    agg = [s for s in chosen.splits if s.aggregated]
                    dis = [s for s in chosen.splits if not s.aggregated]
                    best = find_goodput([p for p in model if not p.split.aggregated], slo)
                    best_split = best.split if best is not None else (dis[0] if dis else None)
                    for split in [*agg, *([best_split] if best_split else [])]:
                        levels = choose_measured(model, split, slo)
                        rate = max(p.tokens_per_second for p in model
                                   if p.split == split and p.concurrency in levels)  # fmt: skip
                        speedup = round(grid.choose_speedup(rate), 3)
                        log.info("aiperf %s ISL %d %s c=%s speed-up %g", profile, isl,
                                 split.name, levels, speedup)  # fmt: skip
                        runs = measure(ws, profile, isl, split, levels, speedup)
                        measured += [point for point, _ in runs]
                ideal = ideal_curve(profile, isl)
                points = model + measured
                every += points
                rows.append((profile, isl, slo, points, ideal))
                image = IMAGES / f"goodput-{profile}-isl{isl}.png"
                plot_pareto(image, f"gpt-oss-120b on {profile}, ISL {isl}, OSL {grid.OSL}, "
                            f"{grid.GPUS} GPUs", points, ideal, slo)  # fmt: skip
        out += ["", "### Goodput", "", render_goodput(rows), ""]
        out += [
            "Aggregated goodput (model) vs the rate-matched ideal (tokens/s/GPU) as the ITL "
            "target moves: the ideal is the ceiling of every disaggregated split at this "
            "GPU count.",
            "",
            render_sensitivity(rows),
            "",
        ]
        out += [f"![{p} ISL {i}](img/goodput-{p}-isl{i}.png)" for p, i, *_ in rows]
        out += ["", "### Every point", "", render_points(
            sorted(every, key=lambda p: (p.profile, p.isl, p.source, p.split.name, p.concurrency))
        )]  # fmt: skip
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
