"""Autoscaling policy vs an oracle, in the simulator (``python -m tandem_dev.bench.autoscale``).

Every standard trace is replayed through the real policy (``tandem.autoscale.decide``,
fed exactly as an actuator feeds it) and through an oracle that knows the load each
stretch of the trace gets and starts workers one cold start ahead - the same requests,
the same pool model. Deterministic: a trace and a seed always give the same figures,
so these are model results, not timings.

Two policy variants run side by side: queues and arrival rates (recommended), and
queues only (what the v1alpha1 API can configure today). A second table repeats the
recommended variant over more seeds to show how much Poisson noise moves the figures.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tandem.api.v1alpha1 import PoolRole
from tandem.autoscale.config import ScalingConfig
from tandem_dev.autoscale_sim.figures import TraceFigures
from tandem_dev.autoscale_sim.oracle import PoolHardware
from tandem_dev.autoscale_sim.simulator import (
    TARGET_PREFILL_UTILIZATION,
    build_standard_configs,
    simulate,
)
from tandem_dev.autoscale_sim.traces import build_standard_traces

STANDARD_SEED = 7
ROBUSTNESS_SEEDS = (1, 2, 3, 4, 5)
VARIANTS = {"queues+rates": True, "queues only": False}
# The targets.
MAX_REACTION_INTERVALS = 2
MAX_FLAPS_PER_30 = 1
MAX_GPU_RATIO = 1.25

Row = dict[str, Any]


def _row(variant: str, seed: int, figures: TraceFigures) -> Row:
    prefill, decode = figures.pools[PoolRole.PREFILL], figures.pools[PoolRole.DECODE]
    reactions = [r for p in (prefill, decode) for r in p.reactions]
    flaps = [p.max_steady_flaps for p in (prefill, decode) if p.max_steady_flaps is not None]
    return {
        "variant": variant,
        "seed": seed,
        "trace": figures.trace.name,
        "description": figures.trace.description,
        "requests": figures.requests,
        "completed": figures.completed,
        "reactions_prefill": list(prefill.reactions),
        "reactions_decode": list(decode.reactions),
        "reaction_max": _worst(reactions),
        "reactions_over_target": sum(1 for r in reactions if r is None or r > 2),
        "reactions_total": len(reactions),
        "flaps_per_30": max(flaps) if flaps else None,
        "steady_intervals": prefill.steady_intervals,
        "direction_changes": prefill.direction_changes + decode.direction_changes,
        "gpu_seconds": figures.gpu_seconds,
        "oracle_gpu_seconds": figures.oracle_gpu_seconds,
        "gpu_ratio": figures.gpu_seconds / figures.oracle_gpu_seconds,
        "gpu_ratio_prefill": prefill.gpu_ratio,
        "gpu_ratio_decode": decode.gpu_ratio,
        "peak_prefill": f"{prefill.peak_desired}/{prefill.peak_needed}",
        "peak_decode": f"{decode.peak_desired}/{decode.peak_needed}",
        "ttft_p50": figures.ttft_p50,
        "ttft_p95": figures.ttft_p95,
        "oracle_ttft_p50": figures.oracle_ttft_p50,
        "oracle_ttft_p95": figures.oracle_ttft_p95,
    }


def _worst(reactions: Sequence[int | None]) -> int | None:
    """The slowest reaction; None if one never got there (or there were none)."""
    reached = [r for r in reactions if r is not None]
    if len(reached) < len(reactions) or not reached:
        return None
    return max(reached)


def run_autoscale_bench(
    seeds: Sequence[int] = ROBUSTNESS_SEEDS, hardware: PoolHardware | None = None
) -> list[Row]:
    """Rows for every (variant, trace) at the standard seed, then the recommended
    variant at each of ``seeds``."""
    hardware = hardware or PoolHardware()
    traces = build_standard_traces()
    rows: list[Row] = []
    for variant, with_rates in VARIANTS.items():
        configs = build_standard_configs(hardware, with_rates=with_rates)
        for trace in traces:
            rows.append(_row(variant, STANDARD_SEED, simulate(trace, configs, hardware)))
    configs = build_standard_configs(hardware)
    for seed in seeds:
        for trace in traces:
            figures = simulate(trace, configs, hardware, seed=seed)
            rows.append(_row("queues+rates", seed, figures))
    return rows


def _fmt_reactions(values: Sequence[int | None]) -> str:
    return ",".join("-" if v is None else str(v) for v in values) or "n/a"


def _fmt(value: float | None, spec: str = ".2f") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return format(value, spec)


def _verdict(row: Row) -> str:
    misses = []
    if row["reactions_over_target"]:
        misses.append(f"reaction {row['reactions_over_target']}/{row['reactions_total']} > 2")
    if row["flaps_per_30"] is not None and row["flaps_per_30"] > MAX_FLAPS_PER_30:
        misses.append("flaps")
    if row["gpu_ratio"] > MAX_GPU_RATIO:
        misses.append("GPU-s")
    return "met" if not misses else "missed: " + ", ".join(misses)


def render_markdown(rows: Sequence[Row], hardware: PoolHardware | None = None) -> str:
    hardware = hardware or PoolHardware()
    config = ScalingConfig(role=PoolRole.PREFILL)
    lines = [
        "Model: one prefill worker prefills "
        f"{hardware.prefill_tokens_per_second:,.0f} prompt tokens/s (one prompt at a time); "
        f"a decode worker holds {hardware.decode_max_sequences} sequences and "
        f"{hardware.decode_kv_capacity_tokens:,} KV tokens and decodes "
        f"{hardware.decode_tokens_per_second_per_sequence:.0f} tokens/s per sequence; "
        f"cold start {hardware.cold_start_seconds:.0f} s (GPU pods loading weights), "
        "billed from scheduling. The router prefills on decode workers "
        f"({hardware.local_prefill_tokens_per_second:,.0f} tokens/s) while the prefill "
        "pool is empty or saturated.",
        "",
        f"Policy: interval {config.interval_seconds:.0f} s, scale-up window "
        f"{config.scale_up_stabilization_seconds:.0f} s, scale-down window "
        f"{config.scale_down_stabilization_seconds:.0f} s, steps +{config.max_step_up}/"
        f"-{config.max_step_down}, tolerance {config.tolerance:.0%}, signal smoothing "
        f"{config.smoothing_seconds:.0f} s (a step beyond x{1 + 2 * config.jump:.1f} is "
        f"taken at once, beyond x{1 + config.jump:.1f} after two intervals); prefill "
        f"target {TARGET_PREFILL_UTILIZATION:.0%} of a worker's tokens/s "
        f"(queues only: {config.target_queued_tokens_per_replica} queued tokens), decode "
        f"{config.target_active_sequences_per_replica} sequences / "
        f"{config.target_kv_utilization:.0%} KV per replica.",
        "",
        "Oracle: knows the load each constant stretch of the trace actually gets, runs "
        "the fewest replicas whose mean load is within tolerance of the target, starting "
        "them one cold start ahead. Reaction: decisions from a rise in need until desired "
        "reaches it (1 = the first decision after the change; '-' = not reached before "
        "the need changed). Flaps: most direction changes of desired in any 30 "
        "consecutive intervals of constant load, after the transient (n/a: no constant "
        "stretch that long). Targets: reaction <= 2, flaps <= 1, GPU-s <= 1.25x oracle.",
        "",
        "| variant | trace | reaction prefill | reaction decode | flaps/30 | GPU-s vs oracle "
        "(prefill, decode) | peak desired/needed (prefill, decode) | TTFT p50 / p95 s "
        "(oracle) | targets |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in (r for r in rows if r["seed"] == STANDARD_SEED):
        lines.append(
            f"| {row['variant']} | {row['trace']} | {_fmt_reactions(row['reactions_prefill'])} "
            f"| {_fmt_reactions(row['reactions_decode'])} | {_fmt(row['flaps_per_30'], 'd')} "
            f"| {row['gpu_ratio']:.2f}x ({row['gpu_ratio_prefill']:.2f}, "
            f"{row['gpu_ratio_decode']:.2f}) | {row['peak_prefill']}, {row['peak_decode']} "
            f"| {_fmt(row['ttft_p50'])} / {_fmt(row['ttft_p95'], '.1f')} "
            f"({_fmt(row['oracle_ttft_p50'])} / {_fmt(row['oracle_ttft_p95'], '.1f')}) "
            f"| {_verdict(row)} |"
        )
    others = [r for r in rows if r["seed"] != STANDARD_SEED]
    if others:
        seeds = sorted({r["seed"] for r in others})
        lines += [
            "",
            f"Same traces, queues+rates, seeds {', '.join(map(str, seeds))} (worst case "
            "over seeds; reactions counted over all bursts and both pools):",
            "",
            "| trace | reactions > 2 | worst reaction | worst flaps/30 | GPU-s vs oracle "
            "(min-max) |",
            "|---|---|---|---|---|",
        ]
        for name in dict.fromkeys(r["trace"] for r in others):
            mine = [r for r in others if r["trace"] == name]
            over = sum(r["reactions_over_target"] for r in mine)
            total = sum(r["reactions_total"] for r in mine)
            worst = [r["reaction_max"] for r in mine if r["reactions_total"]]
            flaps = [r["flaps_per_30"] for r in mine if r["flaps_per_30"] is not None]
            ratios = [r["gpu_ratio"] for r in mine]
            worst_text = "n/a" if not worst else str(_worst(worst) or "-")
            lines.append(
                f"| {name} | {over}/{total} | {worst_text} | "
                f"{max(flaps) if flaps else 'n/a'} | {min(ratios):.2f}-{max(ratios):.2f}x |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tandem_dev.bench.autoscale", description=__doc__
    )
    parser.add_argument("--write", type=Path, help="also write the markdown here")
    parser.add_argument(
        "--seeds", type=int, nargs="*", default=list(ROBUSTNESS_SEEDS), help="robustness seeds"
    )
    args = parser.parse_args(argv)
    markdown = render_markdown(run_autoscale_bench(args.seeds))
    sys.stdout.write(markdown)
    if args.write:
        args.write.write_text(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
