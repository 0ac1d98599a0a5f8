"""The section's markdown (pure): one table per trace, a row per deployment."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tandem_dev.autoscale_sim.traces import Trace
from tandem_dev.bench.adaptive.judge import RowFigures
from tandem_dev.bench.adaptive.rows import AverageWorkload
from tandem_dev.bench.autoscale_live.report import SLO


@dataclass(frozen=True, slots=True)
class TraceRows:
    trace: Trace
    workload: AverageWorkload
    rows: Sequence[tuple[str, RowFigures | None]]  # None: no such deployment fits


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def render_trace(result: TraceRows) -> str:
    w = result.workload
    lines = [
        f"**{result.trace.name}**: {result.trace.description} "
        f"(average: ISL {w.isl:,}, p90 {w.isl_p90:,}, OSL {w.osl}, {w.requests_per_second:g} "
        "req/s)",
        "",
        "| deployment | ran as | attainment | GPU-seconds | goodput tok/s/GPU | requests "
        "(failed) | re-plans | rollouts |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, figures in result.rows:
        if figures is None:
            lines.append(f"| {name} | none meets the SLO within the budget | | | | | | |")
            continue
        f = figures
        lines.append(
            f"| {name} | {f.shape} | {f.attainment:.1%} | {f.gpu_seconds:.0f} | "
            f"{f.goodput_per_gpu:.1f} | {f.requests} ({f.failed}) | {_count(f.replans)} | "
            f"{_count(f.rollouts)} |"
        )
    return "\n".join(lines)


def render_report(results: Sequence[TraceRows], seconds: float, wall_s: float) -> str:
    header = (
        f"SLO: TTFT p90 <= {SLO.ttft_p90_s:g} s, ITL p90 <= {SLO.itl_p90_s * 1e3:g} ms; each "
        f"trace {seconds:.0f} s in real time; GPU budget 4 prefill + 2 decode TP1 workers. "
        f"Static rows: `tandem plan`'s search for the trace's average load, one layout each. "
        f"Run took {wall_s:.0f} s."
    )
    return "\n\n".join([header, *(render_trace(r) for r in results)])
