"""The planner's options as a Pareto chart: tokens/s/GPU against tokens/s/user of every
deployment it ran at the workload's rate, the rate-matched ideal, the ITL target, and
the one it chose. Needs matplotlib (``pip install 'tandem[plot]'``).

``pareto_chart`` is the frame every Pareto chart of Tandem's shares (the goodput
benchmark's too): axes, the rate-matched ideal, the ITL target, the file written."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from tandem.perf.ideal import IdealPoint
from tandem.sim.metrics import Slo
from tandem.sim.planner import Recommendation

if TYPE_CHECKING:  # matplotlib is optional (the plot extra)
    from matplotlib.axes import Axes


class PlotUnavailableError(RuntimeError):
    """matplotlib is not installed."""


@contextmanager
def pareto_chart(path: Path, title: str, ideal: Sequence[IdealPoint], slo: Slo) -> Iterator[Axes]:
    """Axes of tokens/s/GPU against tokens/s/user holding the ideal curve and the ITL
    target; the caller adds its points, the chart is written to ``path`` on exit."""
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailableError(
            "writing a plot needs matplotlib: pip install 'tandem[plot]'"
        ) from None
    matplotlib.use("Agg")  # files only: no display here or in CI
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(
        [q.tokens_per_second_per_user for q in ideal],
        [q.tokens_per_second_per_gpu for q in ideal],
        "k--",
        linewidth=1,
        label="rate-matched ideal",
    )
    try:
        yield ax
        ax.axvline(1.0 / slo.itl_p90_s, color="grey", linestyle=":", linewidth=1)
        ax.text(1.0 / slo.itl_p90_s, ax.get_ylim()[1] * 0.95, " ITL SLO", fontsize=7,
                color="grey")  # fmt: skip
        ax.set_xlabel("tokens/s/user")
        ax.set_ylabel("tokens/s/GPU")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)


def plot_recommendation(recommendation: Recommendation, path: Path, title: str) -> Path:
    with pareto_chart(path, title, recommendation.ideal, recommendation.workload.slo) as ax:
        _draw_evaluated(ax, recommendation)
    return path


def _draw_evaluated(ax: Axes, recommendation: Recommendation) -> None:
    for aggregated, marker in ((True, "o"), (False, "^")):
        for meets, color in ((True, "tab:green"), (False, "tab:red")):
            chosen = [
                e
                for e in recommendation.evaluated
                if (e.candidate.prefill == 0) is aggregated and e.meets is meets
            ]
            if not chosen:
                continue
            kind = "aggregated" if aggregated else "disaggregated"
            ax.scatter(
                [e.tokens_per_second_per_user for e in chosen],
                [e.tokens_per_second_per_gpu for e in chosen],
                marker=marker,
                color=color,
                label=f"{kind}, {'meets' if meets else 'misses'} the SLO",
            )
            for e in chosen:
                ax.annotate(
                    f"{e.candidate.prefill}P{e.candidate.decode}D",
                    (e.tokens_per_second_per_user, e.tokens_per_second_per_gpu),
                    fontsize=6,
                    xytext=(3, 3),
                    textcoords="offset points",
                )
    best = recommendation.chosen
    if best is not None:
        ax.scatter(
            [best.tokens_per_second_per_user],
            [best.tokens_per_second_per_gpu],
            s=160,
            facecolors="none",
            edgecolors="black",
            label="recommended",
        )
