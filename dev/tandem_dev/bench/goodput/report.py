"""Tables and Pareto plots of the goodput section."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tandem.perf.ideal import IdealPoint, find_best_within
from tandem.sim.metrics import Slo
from tandem.sim.plot import pareto_chart
from tandem_dev.bench.goodput.points import Point, compute_ratio, find_goodput

if TYPE_CHECKING:  # matplotlib is optional (the plot extra)
    from matplotlib.axes import Axes


def compute_frontier(points: Iterable[Point]) -> list[Point]:
    """Points no other point beats on both tokens/s/user and tokens/s/GPU, by user rate."""
    ordered = sorted(
        points, key=lambda p: (-p.tokens_per_second_per_user, -p.tokens_per_second_per_gpu)
    )
    frontier: list[Point] = []
    best = -1.0
    for p in ordered:
        if p.tokens_per_second_per_gpu > best:
            frontier.append(p)
            best = p.tokens_per_second_per_gpu
    return frontier


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def render_points(points: Sequence[Point]) -> str:
    lines = [
        "| source | profile | ISL | split | conc. | TTFT p50/p90/p99 s | ITL p50/p90/p99 ms "
        "| tok/s/GPU | tok/s/user | requests | speed-up | plumbing lag |",
        "|---|---|---:|---|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for p in points:
        lag = "-" if p.plumbing_lag is None else f"{p.plumbing_lag:.0%}"
        lines.append(
            f"| {p.source} | {p.profile} | {p.isl} | {p.split.name} | {p.concurrency} | "
            f"{p.ttft.p50:.2f} / {p.ttft.p90:.2f} / {p.ttft.p99:.2f} | "
            f"{_ms(p.itl.p50)} / {_ms(p.itl.p90)} / {_ms(p.itl.p99)} | "
            f"{p.tokens_per_second_per_gpu:,.0f} | {p.tokens_per_second_per_user:.0f} | "
            f"{p.requests}{f' ({p.errors} failed)' if p.errors else ''} | {p.speedup:g} | {lag} |"
        )
    return "\n".join(lines)


def _goodput_cell(point: Point | None, measured: bool = True) -> str:
    if not measured:
        return "not measured"
    if point is None:
        return "none meets it"
    return f"{point.tokens_per_second_per_gpu:,.0f} ({point.split.name}, c={point.concurrency})"


def _ratio_cell(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def render_goodput(
    rows: Sequence[tuple[str, int, Slo, Sequence[Point], Sequence[IdealPoint]]],
) -> str:
    """One row per (profile, ISL): goodput of agg and of the best disaggregated split,
    measured (aiperf) and modelled, against the rate-matched ideal and the targets."""
    lines = [
        "| profile | ISL | SLO | agg (aiperf) | best disagg (aiperf) | disagg / agg | "
        "agg (model) | best disagg (model) | disagg / agg (model) | ideal at the ITL SLO | "
        "disagg / ideal | target |",
        "|---|---:|---|---|---|---:|---|---|---:|---:|---:|---|",
    ]
    for profile, isl, slo, points, ideal in rows:
        cells = []
        for source in ("aiperf", "model"):
            mine = [p for p in points if p.source == source]
            agg = find_goodput([p for p in mine if p.split.aggregated], slo)
            dis = find_goodput([p for p in mine if not p.split.aggregated], slo)
            cells.append((agg, dis, compute_ratio(dis, agg)))
        best_ideal = find_best_within(list(ideal), slo.itl_p90_s)
        ideal_rate = best_ideal.tokens_per_second_per_gpu if best_ideal else None
        (m_agg, m_dis, m_ratio), (s_agg, s_dis, s_ratio) = cells
        measured_here = any(p.source == "aiperf" for p in points)
        measured = m_dis if m_dis is not None else None
        vs_ideal = (
            measured.tokens_per_second_per_gpu / ideal_rate
            if measured is not None and ideal_rate
            else None
        )
        lines.append(
            f"| {profile} | {isl} | {slo.describe()} | {_goodput_cell(m_agg, measured_here)} | "
            f"{_goodput_cell(m_dis, measured_here)} | {_ratio_cell(m_ratio)} | "
            f"{_goodput_cell(s_agg)} | "
            f"{_goodput_cell(s_dis)} | {_ratio_cell(s_ratio)} | "
            f"{'-' if ideal_rate is None else f'{ideal_rate:,.0f}'} | "
            f"{_ratio_cell(vs_ideal)} | {_verdict(isl, m_ratio, vs_ideal)} |"
        )
    return "\n".join(lines)


SENSITIVITY_ITL_S = (0.003, 0.004, 0.005, 0.006, 0.008, 0.010)


def render_sensitivity(
    rows: Sequence[tuple[str, int, Slo, Sequence[Point], Sequence[IdealPoint]]],
) -> str:
    """Why the ratio is what it is: for tighter and looser ITL targets (TTFT as in the
    SLO), the modelled goodput of aggregated serving next to the rate-matched ideal --
    the most any disaggregated split of the same GPUs could reach."""
    head = " | ".join(f"ITL <= {t * 1e3:g} ms" for t in SENSITIVITY_ITL_S)
    lines = [
        f"| profile | ISL | {head} |",
        "|---|---:|" + "---|" * len(SENSITIVITY_ITL_S),
    ]
    for profile, isl, slo, points, ideal in rows:
        top = max(p.concurrency for p in points if p.source == "model")
        cells = []
        for itl in SENSITIVITY_ITL_S:
            target = Slo(slo.ttft_p90_s, itl)
            agg = find_goodput(
                [p for p in points if p.source == "model" and p.split.aggregated], target
            )
            best = find_best_within(list(ideal), itl)
            if best is None:
                cells.append("ideal: none")
            elif agg is None:
                cells.append(f"agg none, ideal {best.tokens_per_second_per_gpu:,.0f}")
            else:
                ratio = best.tokens_per_second_per_gpu / agg.tokens_per_second_per_gpu
                # At the sweep's top concurrency agg may do more: its goodput is a floor.
                capped = agg.concurrency >= top
                cells.append(
                    f"{'>= ' if capped else ''}{agg.tokens_per_second_per_gpu:,.0f} vs "
                    f"{best.tokens_per_second_per_gpu:,.0f} ({'<= ' if capped else ''}"
                    f"{ratio:.2f}x)"
                )
        lines.append(f"| {profile} | {isl} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _verdict(isl: int, ratio: float | None, vs_ideal: float | None) -> str:
    if isl >= 32768:
        ok = ratio is not None and ratio >= 1.5 and vs_ideal is not None and vs_ideal >= 0.75
        return "met (>= 1.5x agg, >= 0.75 ideal)" if ok else "missed (>= 1.5x agg, >= 0.75 ideal)"
    if isl <= 1024:
        ok = ratio is not None and ratio >= 0.9
        return "met (>= 0.9x agg)" if ok else "missed (>= 0.9x agg)"
    return "-"


def plot_pareto(
    path: Path,
    title: str,
    points: Sequence[Point],
    ideal: Sequence[IdealPoint],
    slo: Slo,
) -> Path:
    """tokens/s/GPU against tokens/s/user: modelled frontiers of agg and disagg, the
    rate-matched ideal, aiperf's points, and the ITL SLO."""
    with pareto_chart(path, title, ideal, slo) as ax:
        _draw_points(ax, points)
    return path


def _draw_points(ax: Axes, points: Sequence[Point]) -> None:
    model = [p for p in points if p.source == "model"]
    for label, chosen, style in (
        ("aggregated (model)", [p for p in model if p.split.aggregated], "-"),
        ("disaggregated, best split (model)", [p for p in model if not p.split.aggregated], "-"),
    ):
        front = compute_frontier(chosen)
        ax.plot(
            [p.tokens_per_second_per_user for p in front],
            [p.tokens_per_second_per_gpu for p in front],
            style,
            label=label,
        )
    for aggregated, marker in ((True, "o"), (False, "^")):
        chosen = [p for p in points if p.source == "aiperf" and p.split.aggregated is aggregated]
        if chosen:
            ax.scatter(
                [p.tokens_per_second_per_user for p in chosen],
                [p.tokens_per_second_per_gpu for p in chosen],
                marker=marker,
                s=36,
                zorder=3,
                label=f"{'aggregated' if aggregated else 'disaggregated'} (aiperf)",
            )
            for p in chosen:
                ax.annotate(
                    f"{p.split.name} c{p.concurrency}",
                    (p.tokens_per_second_per_user, p.tokens_per_second_per_gpu),
                    fontsize=6,
                    xytext=(3, 3),
                    textcoords="offset points",
                )
