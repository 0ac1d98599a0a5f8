"""The section's markdown and plots from the collected results (pure but for the PNGs).

Results are plain dicts as the two halves wrote them: ``tandem`` (``plan_cell``),
``aic`` (the driver's recommend entries), ``estimates`` (the driver's estimates of
Tandem's picks) and ``replays`` (``replay_pick`` of AIConfigurator's picks), each keyed
by the cell's key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tandem_dev.bench.planners.cells import Cell
from tandem_dev.bench.planners.pareto import Gain, ParetoPoint, find_frontier, find_largest_gain

Result = Mapping[str, Any]
# A disagreement worth a sentence: more than one GPU apart, or more than 15%.
GPU_GAP = 1
SHARE_GAP = 0.15
# AIConfigurator's disaggregated replica sizes (its sweep's num_gpu_per_replica).
AIC_REPLICA_SIZES = frozenset({1, 2, 4, 8, *range(16, 129, 8)})


@dataclass(frozen=True, slots=True)
class Verdict:
    """One cell read across both tools."""

    cell: Cell
    tandem: Result | None  # Tandem's pick (None: nothing meets)
    aic: Result | None  # AIConfigurator's chosen pick
    estimate: Result | None  # Tandem's pick under AIConfigurator's estimator
    replay: Result | None  # AIConfigurator's pick in Tandem's simulated cluster

    @property
    def tandem_gpus(self) -> int | None:
        return None if self.tandem is None else int(self.tandem["gpus"])

    @property
    def aic_gpus(self) -> int | None:
        return None if self.aic is None else int(self.aic["gpus"])

    @property
    def disagrees(self) -> bool:
        t, a = self.tandem_gpus, self.aic_gpus
        if t is None or a is None:
            return t != a
        return abs(t - a) > GPU_GAP or abs(t - a) > SHARE_GAP * min(t, a)


def collect(
    cells: Sequence[Cell],
    tandem: Mapping[str, Result],
    aic: Mapping[str, Result],
    estimates: Mapping[str, Result],
    replays: Mapping[str, Result],
) -> list[Verdict]:
    verdicts = []
    for cell in cells:
        entry = aic.get(cell.key) or {}
        chosen = entry.get("chosen")
        verdicts.append(
            Verdict(
                cell,
                tandem[cell.key]["pick"],
                entry.get(chosen) if chosen else None,
                estimates.get(cell.key),
                replays.get(cell.key),
            )
        )
    return verdicts


def name_aic_pick(pick: Result) -> str:
    if "workers" in pick:
        return f"aggregated, {pick['workers']} TP{pick['tp']} (batch {pick['bs']})"
    return (
        f"{pick['prefill_workers']} prefill TP{pick['prefill_tp']} + {pick['decode_workers']} "
        f"decode TP{pick['decode_tp']} (batch {pick['decode_bs']})"
    )


def explain(v: Verdict) -> str:
    """Why the two tools disagree, from what each judge said of the other's pick."""
    t, a = v.tandem_gpus, v.aic_gpus
    if t is None:
        reason = v.cell.key
        return f"Tandem finds no deployment within 32 workers per pool ({reason})."
    if a is None:
        return "AIConfigurator finds no configuration meeting the TPOT target."
    if a < t:
        replay = v.replay or {}
        if replay.get("error"):
            return f"AIConfigurator's pick cannot run in the simulated engine: {replay['error']}."
        if replay.get("meets"):
            return (
                "AIConfigurator's pick, with its own batch limit and step budget, also meets "
                "the SLO in Tandem's simulation; Tandem's search, which tries the engine's "
                "batch limit or its ideal batch and at most eight candidates per GPU count, "
                "missed it."
            )
        return (
            "AIConfigurator's pick misses in Tandem's simulation ("
            + _misses(v.cell, replay, "ttft_p90_s", "itl_p90_s")
            + "): AIConfigurator judges a mean TPOT at a full, fixed batch, Tandem the p90 "
            "over requests arriving at random, which queue behind each other's prefills."
        )
    estimate = v.estimate or {}
    if estimate.get("error"):
        return f"AIConfigurator cannot estimate Tandem's pick: {estimate['error']}."
    if estimate.get("meets"):
        granularity = ""
        tandem = v.tandem or {}
        if tandem.get("mode") == "disaggregated" and t not in AIC_REPLICA_SIZES:
            granularity = (
                f"; its disaggregated replicas come in 1, 2, 4, 8, 16, ... GPUs, "
                f"and this one has {t}"
            )
        return (
            "Tandem's pick meets the SLO under AIConfigurator's own estimate too, but "
            f"AIConfigurator's search does not reach it{granularity}."
        )
    if not estimate.get("reaches_rate", True):
        return (
            "Under AIConfigurator's estimate Tandem's pick cannot carry the rate at any "
            "batch: its model of the same workers is slower than Tandem's."
        )
    return (
        "Under AIConfigurator's estimate Tandem's pick misses ("
        + _misses_ms(v.cell, estimate)
        + "): "
        + (
            "its disaggregated TTFT carries a fixed x1.98 correction."
            if (v.tandem or {}).get("mode") == "disaggregated"
            and estimate.get("ttft_ms", 0.0) > v.cell.ttft_s * 1e3
            else "its step model prices the same workers slower."
        )
    )


def _misses(cell: Cell, run: Result, ttft_key: str, itl_key: str) -> str:
    parts = []
    if run.get(ttft_key, 0.0) > cell.ttft_s:
        parts.append(f"TTFT p90 {run[ttft_key]:.2f} s > {cell.ttft_s:g} s")
    if run.get(itl_key, 0.0) > cell.tpot_ms / 1e3:
        parts.append(f"ITL p90 {run[itl_key] * 1e3:.1f} ms > {cell.tpot_ms} ms")
    return ", ".join(parts) or "unfinished requests"


def _misses_ms(cell: Cell, estimate: Result) -> str:
    parts = []
    if estimate.get("ttft_ms", 0.0) > cell.ttft_s * 1e3:
        parts.append(f"TTFT {estimate['ttft_ms']:.0f} ms > {cell.ttft_s * 1e3:.0f} ms")
    if estimate.get("tpot_ms", 0.0) > cell.tpot_ms:
        parts.append(f"TPOT {estimate['tpot_ms']:.1f} ms > {cell.tpot_ms} ms")
    return ", ".join(parts) or "the rate"


def render_cells(verdicts: Sequence[Verdict]) -> list[str]:
    lines = [
        "| cell | Tandem's pick | GPUs | AIConfigurator's pick | GPUs | Tandem's pick under "
        "AIConfigurator (TTFT / TPOT ms) | AIConfigurator's pick in Tandem's simulation "
        "(TTFT p90 s / ITL p90 ms) |",
        "|---|---|---:|---|---:|---|---|",
    ]
    for v in verdicts:
        lines.append(
            f"| {v.cell.describe()} | {_or_none(v.tandem, 'name')} | {_gpus(v.tandem_gpus)} "
            f"| {name_aic_pick(v.aic) if v.aic else 'none'} | {_gpus(v.aic_gpus)} "
            f"| {_estimate(v.estimate)} | {_replay(v.replay)} |"
        )
    return lines


def _or_none(result: Result | None, key: str) -> str:
    return "none" if result is None else str(result[key])


def _gpus(gpus: int | None) -> str:
    return "-" if gpus is None else str(gpus)


def _estimate(e: Result | None) -> str:
    if e is None:
        return "-"
    if e.get("error"):
        return f"error: {e['error']}"
    verdict = "meets" if e["meets"] else "misses"
    return f"{e['ttft_ms']:.0f} / {e['tpot_ms']:.1f} (batch {e['batch']}) {verdict}"


def _replay(r: Result | None) -> str:
    if r is None:
        return "-"
    if r.get("error"):
        return f"error: {r['error']}"
    verdict = "meets" if r["meets"] else "misses"
    return f"{r['ttft_p90_s']:.2f} / {r['itl_p90_s'] * 1e3:.1f} {verdict}"


@dataclass(frozen=True, slots=True)
class Summary:
    cells: int
    both_pick: int  # cells where both tools pick something
    fewer_or_equal: int  # of those, Tandem needs no more GPUs than AIConfigurator
    aic_holds: int  # cells where AIConfigurator's pick meets in Tandem's simulation too
    fewer_or_equal_held: int  # of those, Tandem needs no more GPUs
    estimated: int  # Tandem picks AIConfigurator could estimate
    meets_under_aic: int
    replayed: int
    aic_meets_in_tandem: int


def summarize(verdicts: Sequence[Verdict]) -> Summary:
    both = [v for v in verdicts if v.tandem_gpus is not None and v.aic_gpus is not None]
    estimated = [v for v in verdicts if v.estimate and not v.estimate.get("error")]
    replayed = [v for v in verdicts if v.replay and not v.replay.get("error")]
    held = [v for v in both if v.replay and v.replay.get("meets")]
    return Summary(
        len(verdicts),
        len(both),
        sum(1 for v in both if (v.tandem_gpus or 0) <= (v.aic_gpus or 0)),
        len(held),
        sum(1 for v in held if (v.tandem_gpus or 0) <= (v.aic_gpus or 0)),
        len(estimated),
        sum(1 for v in estimated if v.estimate and v.estimate["meets"]),
        len(replayed),
        sum(1 for v in replayed if v.replay and v.replay["meets"]),
    )


def render_summary(s: Summary) -> list[str]:
    def share(part: int, whole: int) -> str:
        return f"{part}/{whole} ({part / whole:.0%})" if whole else "0/0"

    return [
        "| measure | cells | target |",
        "|---|---:|---|",
        f"| Tandem needs no more GPUs than AIConfigurator (both pick) | "
        f"{share(s.fewer_or_equal, s.both_pick)} | >= 90% |",
        f"| the same, where AIConfigurator's pick also meets the SLO in Tandem's simulation | "
        f"{share(s.fewer_or_equal_held, s.aic_holds)} | (for reading) |",
        f"| Tandem's pick meets the SLO under AIConfigurator's estimate | "
        f"{share(s.meets_under_aic, s.estimated)} | >= 90% |",
        f"| AIConfigurator's pick meets the SLO in Tandem's simulation | "
        f"{share(s.aic_meets_in_tandem, s.replayed)} | (for reading) |",
    ]


def render_disagreements(verdicts: Sequence[Verdict]) -> list[str]:
    lines = []
    for v in verdicts:
        if v.disagrees:
            lines.append(
                f"- **{v.cell.describe()}**: Tandem {_gpus(v.tandem_gpus)} GPUs, "
                f"AIConfigurator {_gpus(v.aic_gpus)}. {explain(v)}"
            )
    return lines or ["- none"]


def render_stalls(
    verdicts: Sequence[Verdict], bounded: Mapping[str, Result], bound_ms: float
) -> list[str]:
    lines = [
        "| cell | Tandem's pick: longest gap p90 | AIConfigurator's pick: longest gap p90 "
        f"| best under a {bound_ms:g} ms bound (Tandem) | GPUs |",
        "|---|---:|---:|---|---:|",
    ]
    for v in verdicts:
        plan = bounded.get(v.cell.key)
        if plan is None:
            continue
        pick = plan["pick"]
        lines.append(
            f"| {v.cell.describe()} | {_gap(v.tandem)} | {_gap(v.replay)} "
            f"| {_or_none(pick, 'name')} | {_gpus(None if pick is None else pick['gpus'])} |"
        )
    return lines


def _gap(run: Result | None) -> str:
    if run is None or run.get("error"):
        return "-"
    return f"{run['gap_p90_s'] * 1e3:.0f} ms"


def tandem_curves(
    points: Sequence[ParetoPoint], ttft_s: float
) -> dict[str, list[tuple[float, float]]]:
    """Frontier inputs by configuration family: disaggregated, every aggregated step
    budget, and all aggregated points together."""
    kept = [p for p in points if p.ttft_p90_s <= ttft_s]
    curves: dict[str, list[tuple[float, float]]] = {
        "disaggregated": [_xy(p) for p in kept if not p.aggregated],
        "aggregated (any step)": [_xy(p) for p in kept if p.aggregated],
    }
    for step in dict.fromkeys(p.step for p in kept if p.aggregated):
        curves[f"aggregated, {step}"] = [_xy(p) for p in kept if p.aggregated and p.step == step]
    return curves


def _xy(p: ParetoPoint) -> tuple[float, float]:
    return p.tokens_per_s_per_user, p.tokens_per_s_per_gpu


def render_gains(rows: Sequence[tuple[str, str, str, Gain | None]]) -> list[str]:
    lines = [
        "| GPU | estimator | disaggregated against | largest gain in tokens/s/user | at "
        "tokens/s/GPU | tokens/s/user (disagg / agg) |",
        "|---|---|---|---:|---:|---|",
    ]
    for profile, source, against, gain in rows:
        if gain is None:
            lines.append(f"| {profile} | {source} | {against} | n/a (no overlap) | | |")
            continue
        lines.append(
            f"| {profile} | {source} | {against} | {gain.ratio:.2f}x "
            f"| {gain.tokens_per_s_per_gpu:,.0f} | {gain.disaggregated_user:.0f} / "
            f"{gain.aggregated_user:.0f} |"
        )
    return lines


def compute_gains(
    profile: str, source: str, curves: Mapping[str, Sequence[tuple[float, float]]]
) -> list[tuple[str, str, str, Gain | None]]:
    disaggregated = curves["disaggregated"]
    return [
        (profile, source, name, find_largest_gain(disaggregated, points))
        for name, points in curves.items()
        if name != "disaggregated"
    ]


def plot_pareto(
    path: Path,
    title: str,
    tandem: Mapping[str, Sequence[tuple[float, float]]],
    aic: Mapping[str, Sequence[tuple[float, float]]],
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    styles = {"disaggregated": "-o", "aggregated (any step)": "-s"}
    for source, curves, alpha in (("Tandem", tandem, 1.0), ("AIConfigurator", aic, 0.6)):
        for name in ("disaggregated", "aggregated (any step)"):
            frontier = find_frontier(curves.get(name, ()))
            if frontier:
                xs, ys = zip(*frontier, strict=True)
                axes.plot(xs, ys, styles[name], alpha=alpha, label=f"{source}: {name}",
                          linestyle="-" if source == "Tandem" else "--")  # fmt: skip
    axes.set_xlabel("tokens/s/user")
    axes.set_ylabel("tokens/s/GPU")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
