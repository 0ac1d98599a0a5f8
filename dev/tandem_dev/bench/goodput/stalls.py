"""``python -m tandem_dev.bench.goodput.stalls``: how long streams freeze at 32k ISL,
aggregated vs disaggregated, token by token.

The goodput section holds each request to its mean ITL, aiperf's figure. A step that
carries a chunk of another prompt's prefill delays every stream on that worker by the
chunk's time, and a mean over 1,024 tokens dilutes it. Here every gap between two tokens
of a stream counts: in virtual time at each deployment and concurrency, and through the
real stack (aiperf's inter-chunk latency) at three points; then goodput again under SLOs
that bound the gaps. An aggregated worker's step budget (``max_num_tokens``, its prefill
chunk) trades the length of its stalls against TTFT and throughput, so it is swept too.
"""

from __future__ import annotations

import argparse
import enum
import logging
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tandem.sim.metrics import Percentiles, Slo, compute_percentiles
from tandem_dev.bench.goodput import grid
from tandem_dev.bench.goodput.measure import Workspace, measure
from tandem_dev.bench.goodput.modelled import simulate_outcomes, summarize_outcomes
from tandem_dev.bench.goodput.points import Point, Split

ISL = 32768
PROFILES = ("gb200", "b200")
MEASURED_PROFILE = "gb200"
# 5x the goodput section's 6 ms ITL target, after Sarathi-Serve (OSDI 2024), whose strict
# tail target is 5x a decode step's time: a gap this long is a visible hitch in a stream
# that otherwise moves at ~170 tokens/s.
GAP_LIMIT_S = 0.030

log = logging.getLogger("tandem_dev.bench.goodput")


@dataclass(frozen=True, slots=True)
class Variant:
    split: Split
    max_num_tokens: int | None = None  # the engines' step budget; None: their default

    @property
    def name(self) -> str:
        if self.max_num_tokens is None:
            return self.split.name
        return f"{self.split.name}, {self.max_num_tokens // 1024}k chunks"


VARIANTS = (
    Variant(Split(0, 4), 8192),
    Variant(Split(0, 4), 2048),
    Variant(Split(0, 4), 1024),
    Variant(Split(1, 3)),
    Variant(Split(2, 2)),
)


@dataclass(frozen=True, slots=True)
class Stalls:
    """The gaps between consecutive tokens of a run's streams."""

    gaps: Percentiles  # over every gap of every stream (time between tokens, TBT)
    longest: Percentiles  # over requests, of each stream's longest gap
    worst: float
    frozen: float  # share of streams with a gap longer than the limit

    def describe(self) -> str:
        return (
            f"{self.gaps.p50 * 1e3:.1f} / {self.gaps.p99 * 1e3:.1f} / {self.worst * 1e3:.0f} | "
            f"{self.longest.p50 * 1e3:.1f} / {self.longest.p90 * 1e3:.1f} | {self.frozen:.0%}"
        )


def summarize_gaps(per_request: Iterable[Sequence[float]], limit_s: float) -> Stalls:
    """``per_request``: each stream's gaps; streams of one chunk have none and count in
    neither the gaps nor the longest."""
    streams = [list(g) for g in per_request if g]
    if not streams:
        raise ValueError("no stream had two chunks")
    every = [gap for stream in streams for gap in stream]
    longest = [max(stream) for stream in streams]
    return Stalls(
        gaps=compute_percentiles(every),
        longest=compute_percentiles(longest),
        worst=max(longest),
        frozen=sum(1 for gap in longest if gap > limit_s) / len(streams),
    )


class GapBound(enum.Enum):
    """What an SLO asks of the gaps on top of TTFT p90 and (mean) ITL p90."""

    NONE = "none"
    TOKENS_P99 = "tbt_p99"  # 99% of gaps within the limit (Sarathi-Serve's tail TBT)
    STREAMS_P90 = "longest_p90"  # 90% of streams never wait longer than the limit

    def describe(self, limit_s: float) -> str:
        ms = f"{limit_s * 1e3:g} ms"
        return {
            GapBound.NONE: "no bound on gaps",
            GapBound.TOKENS_P99: f"TBT p99 <= {ms}",
            GapBound.STREAMS_P90: f"longest gap p90 <= {ms}",
        }[self]

    def holds(self, stalls: Stalls, limit_s: float) -> bool:
        if self is GapBound.TOKENS_P99:
            return stalls.gaps.p99 <= limit_s
        if self is GapBound.STREAMS_P90:
            return stalls.longest.p90 <= limit_s
        return True


@dataclass(frozen=True, slots=True)
class Run:
    variant: Variant
    point: Point
    stalls: Stalls


def find_stall_goodput(
    runs: Iterable[Run], slo: Slo, bound: GapBound, limit_s: float
) -> Run | None:
    """The run with the most tokens/s/GPU meeting the SLO and the bound on gaps."""
    meeting = [r for r in runs if r.point.meets(slo) and bound.holds(r.stalls, limit_s)]
    return max(meeting, key=lambda r: r.point.tokens_per_second_per_gpu, default=None)


def sweep(profile: str, variant: Variant) -> list[Run]:
    runs = []
    for c in grid.MODEL_CONCURRENCY:
        outcomes = simulate_outcomes(profile, ISL, grid.OSL, variant.split, c,
                                     grid.count_requests(c), grid.RAMP_MODELLED_S,
                                     variant.max_num_tokens)  # fmt: skip
        point = summarize_outcomes(outcomes, profile, ISL, grid.OSL, variant.split, c)
        runs.append(Run(variant, point, summarize_gaps((o.gaps for o in outcomes), GAP_LIMIT_S)))
    return runs


def render_goodput(model: dict[str, list[Run]], slo: Slo) -> str:
    bounds = list(GapBound)
    lines = [
        "| profile | deployment | "
        + " | ".join(f"{slo.describe()}, {b.describe(GAP_LIMIT_S)}" for b in bounds)
        + " |",
        "|---|---|" + "---|" * len(bounds),
    ]
    for profile in PROFILES:
        runs = model[profile]
        for variant in VARIANTS:
            cells = []
            for bound in bounds:
                found = find_stall_goodput([r for r in runs if r.variant == variant], slo, bound,
                                           GAP_LIMIT_S)  # fmt: skip
                cells.append(_cell(found))
            lines.append(f"| {profile} | {variant.name} | " + " | ".join(cells) + " |")
        ratios = []
        for bound in bounds:
            agg = find_stall_goodput([r for r in runs if r.variant.split.aggregated], slo, bound,
                                     GAP_LIMIT_S)  # fmt: skip
            dis = find_stall_goodput([r for r in runs if not r.variant.split.aggregated], slo,
                                     bound, GAP_LIMIT_S)  # fmt: skip
            ratios.append(_ratio(dis, agg))
        lines.append(f"| {profile} | **best disaggregated / best aggregated** | "
                     + " | ".join(ratios) + " |")  # fmt: skip
    return "\n".join(lines)


def _cell(run: Run | None) -> str:
    if run is None:
        return "none meets it"
    return f"{run.point.tokens_per_second_per_gpu:,.0f} (c={run.point.concurrency})"


def _ratio(dis: Run | None, agg: Run | None) -> str:
    if dis is None or agg is None:
        return "n/a"
    value = dis.point.tokens_per_second_per_gpu / agg.point.tokens_per_second_per_gpu
    return f"{value:.2f}x ({dis.variant.name} vs {agg.variant.name})"


def render_stalls(rows: Sequence[tuple[str, Run]]) -> str:
    lines = [
        "| source | profile | deployment | conc. | tok/s/GPU | TTFT p90 s | ITL p90 ms "
        "(per-request mean) | TBT p50 / p99 / max ms | longest gap p50 / p90 ms "
        f"| streams with a gap > {GAP_LIMIT_S * 1e3:g} ms |",
        "|---|---|---|---:|---:|---:|---:|---|---|---:|",
    ]
    for source, run in rows:
        p = run.point
        lines.append(
            f"| {source} | {p.profile} | {run.variant.name} | {p.concurrency} | "
            f"{p.tokens_per_second_per_gpu:,.0f} | {p.ttft.p90:.2f} | {p.itl.p90 * 1e3:.1f} | "
            + run.stalls.describe()
            + " |"
        )
    return "\n".join(lines)


def measure_stalls(ws: Workspace, run: Run) -> Run | None:
    """The same deployment and concurrency through the real stack, gaps in modelled
    seconds (wall x speed-up)."""
    variant, c = run.variant, run.point.concurrency
    speedup = round(grid.choose_speedup(run.point.tokens_per_second), 3)
    log.info("aiperf %s c=%d speed-up %g", variant.name, c, speedup)
    measured = measure(ws, MEASURED_PROFILE, ISL, variant.split, [c], speedup,
                       variant.max_num_tokens)  # fmt: skip
    if not measured:
        return None
    point, records = measured[0]
    gaps = ([gap * speedup for gap in r.gaps] for r in records)
    return Run(variant, point, summarize_gaps(gaps, GAP_LIMIT_S))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tandem_dev.bench.goodput.stalls")
    parser.add_argument("--model-only", action="store_true", help="no aiperf runs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s")
    logging.getLogger("tandem.engines.simulated.engine").setLevel(logging.WARNING)
    slo = grid.SLOS[ISL]
    model = {p: [r for v in VARIANTS for r in sweep(p, v)] for p in PROFILES}
    # At each deployment's goodput under the goodput section's SLO: what its streams see.
    rows: list[tuple[str, Run]] = []
    for profile in PROFILES:
        for variant in VARIANTS:
            runs = [r for r in model[profile] if r.variant == variant]
            found = find_stall_goodput(runs, slo, GapBound.NONE, GAP_LIMIT_S)
            if found is not None:
                rows.append(("model", found))
    measured: list[tuple[str, Run]] = []
    if not args.model_only:
        with tempfile.TemporaryDirectory(prefix="tandem-stalls-") as tmp:
            ws = Workspace(Path(tmp), (ISL,))
            for target in choose_measured(model[MEASURED_PROFILE], slo):
                got = measure_stalls(ws, target)
                measured += [("model", target)] + ([("aiperf", got)] if got else [])
    out = [
        f"Simulated gpt-oss-120b, ISL {ISL}, OSL {grid.OSL}, {grid.GPUS} TP1 GPUs per "
        "deployment, as in the goodput section; 'Nk chunks': the aggregated workers' "
        "`max_num_tokens` (decode rows + prefill chunk per step; the engine's default is "
        "8k). TBT: every gap between two tokens of a stream; longest gap: each stream's "
        f"worst; the gap limit, {GAP_LIMIT_S * 1e3:g} ms, is 5x the ITL target (Sarathi-Serve's "
        "strict tail target is 5x a decode step).",
        "",
        "### Goodput when the gaps count (model, tokens/s/GPU)",
        "",
        render_goodput(model, slo),
        "",
        "### What the streams see at each deployment's goodput point (no bound on gaps)",
        "",
        render_stalls(rows),
    ]
    if measured:
        out += [
            "",
            f"### The real stack at three of those points ({MEASURED_PROFILE}, aiperf's "
            "inter-chunk latency in modelled time; chunks that arrive together count 0)",
            "",
            render_stalls(measured),
        ]
    print("\n".join(out))
    return 0


def choose_measured(runs: Sequence[Run], slo: Slo) -> list[Run]:
    """Aggregated with the default chunk at its goodput, aggregated with the smallest
    chunk at its goodput when streams may not freeze, the best disaggregated split at
    its goodput."""
    chosen = []
    default_agg, small_agg = VARIANTS[0], VARIANTS[2]
    for variant, bound in ((default_agg, GapBound.NONE), (small_agg, GapBound.STREAMS_P90)):
        found = find_stall_goodput([r for r in runs if r.variant == variant], slo, bound,
                                   GAP_LIMIT_S)  # fmt: skip
        if found is not None:
            chosen.append(found)
    dis = find_stall_goodput([r for r in runs if not r.variant.split.aggregated], slo,
                             GapBound.NONE, GAP_LIMIT_S)  # fmt: skip
    if dis is not None:
        chosen.append(dis)
    return chosen


if __name__ == "__main__":
    raise SystemExit(main())
