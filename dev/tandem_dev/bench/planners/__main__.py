"""``python -m tandem_dev.bench.planners [--only TEXT] [--work DIR]``: the planners
section of docs/benchmarks.md on stdout, the Pareto plots in docs/img/.

Two phases, each with AIConfigurator's driver running in its own venv beside this
process (two CPUs, two programs): its recommendations while Tandem plans every cell and
sweeps the Pareto curves, then its estimates of Tandem's picks while Tandem replays its
picks. Every result is kept under ``--work`` as it comes, so a rerun resumes.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tandem_dev.bench.planners import pareto, report, tandem_side
from tandem_dev.bench.planners.aic_client import finish_driver, require_aiconfigurator, start_driver
from tandem_dev.bench.planners.cells import LONG_ISL, STALL_BOUND_S, Cell, build_cells

IMAGES = Path("docs/img")
BIG_MODEL = "gpt-oss-120b"


class Store:
    """One JSON file of results by key, written after each one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}

    def get(self, key: str, compute: Callable[[], Any]) -> Any:
        if key not in self.data:
            self.data[key] = compute()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(self.data, indent=1))
        return self.data[key]


def workload_of(cell: Cell) -> dict[str, Any]:
    return {
        "id": cell.key, "model": cell.model_id, "system": cell.system, "isl": cell.isl,
        "osl": cell.osl, "ttft_ms": cell.ttft_s * 1e3, "tpot_ms": cell.tpot_ms, "rate": cell.rate,
    }  # fmt: skip


def as_deployment(pick: Mapping[str, Any]) -> dict[str, Any]:
    if pick["mode"] == "aggregated":
        step = pick["max_num_tokens"] or tandem_side.default_step_tokens()
        return {"mode": "agg", "workers": pick["decode_workers"], "tp": pick["decode_tp"],
                "max_num_tokens": step}  # fmt: skip
    return {
        "mode": "disagg", "prefill_workers": pick["prefill_workers"],
        "prefill_tp": pick["prefill_tp"], "decode_workers": pick["decode_workers"],
        "decode_tp": pick["decode_tp"],
    }  # fmt: skip


def _sweep(cell: Cell) -> list[dict[str, Any]]:
    return [asdict(p) for p in pareto.sweep(cell)]


def long_cells(cells: Sequence[Cell]) -> list[Cell]:
    return [c for c in cells if c.isl == LONG_ISL and c.model == BIG_MODEL]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tandem_dev.bench.planners")
    parser.add_argument("--only", default="", help="cells whose key contains TEXT")
    parser.add_argument("--work", type=Path, default=Path("build/bench/planners"))
    args = parser.parse_args(argv)
    require_aiconfigurator()
    cells = [c for c in build_cells() if args.only in c.key]
    work: Path = args.work
    plans, bounded = Store(work / "tandem.json"), Store(work / "tandem-stall.json")
    sweeps, replays = Store(work / "pareto.json"), Store(work / "replays.json")

    driver = start_driver(work, "recommend", {"recommend": [workload_of(c) for c in cells]})
    for cell in cells:
        plans.get(cell.key, functools.partial(tandem_side.plan_cell, cell))
    for cell in long_cells(cells):
        bounded.get(cell.key, functools.partial(tandem_side.plan_cell, cell, STALL_BOUND_S))
    profiles = {c.profile.value: c for c in long_cells(cells)}
    for profile, cell in profiles.items():
        sweeps.get(profile, functools.partial(_sweep, cell))
    aic = finish_driver(work, "recommend", driver)["recommend"]

    estimate = [
        {**workload_of(c), "deployment": as_deployment(plans.data[c.key]["pick"])}
        for c in cells
        if plans.data[c.key]["pick"] is not None
    ]
    driver = start_driver(work, "estimate", {"estimate": estimate})
    for cell in cells:
        entry = aic.get(cell.key, {})
        chosen = entry.get("chosen")
        if chosen:
            replays.get(cell.key, functools.partial(tandem_side.replay_pick, cell, entry[chosen]))
    estimates = finish_driver(work, "estimate", driver)["estimate"]

    verdicts = report.collect(cells, plans.data, aic, estimates, replays.data)
    print("\n".join(render(verdicts, bounded.data, sweeps.data, aic, profiles)))
    return 0


def render(
    verdicts: Sequence[report.Verdict],
    bounded: Mapping[str, Any],
    sweeps: Mapping[str, Any],
    aic: Mapping[str, Any],
    profiles: Mapping[str, Cell],
) -> list[str]:
    lines = report.render_summary(report.summarize(verdicts))
    lines += ["", "### Where they disagree", "", *report.render_disagreements(verdicts)]
    lines += ["", "### Every cell", "", *report.render_cells(verdicts)]
    # Only the cells planned under the stall bound have a row (render_stalls skips others).
    stalls = report.render_stalls(verdicts, bounded, STALL_BOUND_S * 1e3)
    lines += ["", "### Stalls at 32k", "", *stalls]
    gains: list[tuple[str, str, str, pareto.Gain | None]] = []
    images = []
    for profile, cell in profiles.items():
        points = [pareto.ParetoPoint(**p) for p in sweeps[profile]]
        tandem = report.tandem_curves(points, cell.ttft_s)
        fronts = aic.get(cell.key, {}).get("pareto") or {}
        theirs = {
            "disaggregated": fronts.get("disagg", []),
            "aggregated (any step)": fronts.get("agg", []),
        }
        gains += report.compute_gains(profile, "Tandem (simulated cluster)", tandem)
        gains += report.compute_gains(profile, "AIConfigurator (its frontier)", theirs)
        image = IMAGES / f"planners-pareto-{profile}.png"
        report.plot_pareto(image, f"gpt-oss-120b on {profile}, ISL 32k / OSL 1k", tandem, theirs)
        images.append(f"![{profile}](img/{image.name})")
    lines += ["", "### Interactivity at equal throughput (32k)", "", *report.render_gains(gains)]
    return [*lines, "", *images]


if __name__ == "__main__":
    raise SystemExit(main())
