"""The section's markdown (pure): one table per trace and hardware, a row per deployment,
the targets judged under each; and its plot (attainment against GPU-seconds)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tandem_dev.autoscale_sim.traces import Trace
from tandem_dev.bench.adaptive.judge import RowFigures, judge_targets
from tandem_dev.bench.adaptive.rows import (
    AIC_AGGREGATED,
    AIC_DISAGGREGATED,
    AUTOSCALING,
    PLANNING,
    STATIC_AGGREGATED,
    STATIC_DISAGGREGATED,
    STATIC_PEAK,
    AverageWorkload,
    TraceLoads,
)
from tandem_dev.bench.autoscale_live.report import SLO


@dataclass(frozen=True, slots=True)
class TraceRows:
    profile: str  # the simulated hardware
    trace: Trace
    loads: TraceLoads
    rows: Sequence[tuple[str, RowFigures | str]]  # a string: why the row did not run


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def render_trace(result: TraceRows) -> str:
    lines = [
        f"**{result.trace.name}, {result.profile.upper()}**: {result.trace.description} "
        f"(average: {_workload(result.loads.average)}; peak: {_workload(result.loads.peak)}; "
        f"planning auto deployed for {_workload(result.loads.deployed)})",
        "",
        "| deployment | ran as | attainment | GPU-seconds | goodput tok/s/GPU | requests "
        "(failed) | re-plans | rollouts |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, figures in result.rows:
        if isinstance(figures, str):
            lines.append(f"| {name} | {figures} | | | | | | |")
            continue
        f = figures
        lines.append(
            f"| {name} | {f.shape} | {f.attainment:.1%} | {f.gpu_seconds:.0f} | "
            f"{f.goodput_per_gpu:.1f} | {f.requests} ({f.failed}) | {_count(f.replans)} | "
            f"{_count(f.rollouts)} |"
        )
    target = judge_targets(result.trace.name, dict(result.rows))
    return "\n".join([*lines, "", f"Target: {target}."])


def _workload(w: AverageWorkload) -> str:
    return f"ISL {w.isl:,}, p90 {w.isl_p90:,}, OSL {w.osl}, {w.requests_per_second:g} req/s"


def plot_name(profile: str, only: Sequence[str] | None) -> str:
    """The plot of a run on ``profile``: a run of some traces only (``--only``) has its
    own, so that it leaves the whole run's panels as they are."""
    return f"adaptive-{'-'.join([profile, *(only or [])])}.png"


def render_report(
    results: Sequence[TraceRows], seconds: float, wall_s: float, only: Sequence[str] | None
) -> str:
    header = (
        f"SLO: TTFT p90 <= {SLO.ttft_p90_s:g} s, ITL p90 <= {SLO.itl_p90_s * 1e3:g} ms; each "
        f"trace {seconds:.0f} s in real time; GPU budget 4 prefill + 2 decode TP1 workers of "
        f"the simulated engine (gpt-oss-120b, fp8 KV). "
        f"Static rows: `tandem plan`'s search for the trace's average load, one layout each, "
        f"and AIConfigurator's picks for it (given the mean prompt; run where they fit the "
        f"budget); static for the peak: `tandem plan`'s pick for the busiest eighth of the "
        f"trace (the most prompt tokens), a static deployment sized to hold the SLO "
        f"throughout; "
        f"planning auto: `spec.workload` is the trace's first quarter, what a user knows at "
        f"deploy time. "
        f"Run took {wall_s:.0f} s."
    )
    profiles = dict.fromkeys(r.profile for r in results)
    plots = [
        f"![attainment vs GPU-seconds, {p.upper()}](img/{plot_name(p, only)})" for p in profiles
    ]
    return "\n\n".join([header, *(render_trace(r) for r in results), *plots])


def plot_attainment(path: Path, results: Sequence[TraceRows]) -> None:
    """One panel per trace: each deployment's attainment against its GPU-seconds, the 95%
    line across (one hardware's results)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(results), figsize=(3.2 * len(results), 3.4), squeeze=False)
    # One look per row in every panel (a panel without a row must not shift the colours).
    styles = {
        STATIC_AGGREGATED: ("s", "tab:blue"),
        STATIC_DISAGGREGATED: ("D", "tab:orange"),
        STATIC_PEAK: ("P", "tab:gray"),
        AIC_AGGREGATED: ("s", "tab:purple"),
        AIC_DISAGGREGATED: ("D", "tab:brown"),
        AUTOSCALING: ("^", "tab:green"),
        PLANNING: ("o", "tab:red"),
    }
    for panel, result in zip(axes[0], results, strict=True):
        for name, figures in result.rows:
            if isinstance(figures, RowFigures):
                marker, colour = styles.get(name, ("o", "black"))
                panel.plot(figures.gpu_seconds, figures.attainment * 100, marker,
                           color=colour, markersize=8, label=name)  # fmt: skip
        panel.axhline(95, color="grey", linestyle="--", linewidth=0.8)
        panel.set_title(f"{result.trace.name} ({result.profile.upper()})", fontsize=9)
        panel.set_xlabel("GPU-seconds")
        panel.grid(alpha=0.3)
    axes[0][0].set_ylabel("requests within the SLO (%)")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
