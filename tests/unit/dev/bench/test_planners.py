"""The planner comparison's pure parts: the grid, Pareto frontiers and the gain read off
them, and how a cell's two picks are read (hand-built results, no tool runs)."""

from __future__ import annotations

from typing import Any

import pytest

from tandem.api.v1alpha1 import AcceleratorProfile
from tandem_dev.bench.planners.__main__ import as_deployment
from tandem_dev.bench.planners.cells import Cell, build_cells
from tandem_dev.bench.planners.pareto import Gain, find_frontier, find_largest_gain
from tandem_dev.bench.planners.report import Verdict, explain, summarize
from tandem_dev.bench.planners.tandem_side import replay_pick

CELL = Cell("gpt-oss-120b", AcceleratorProfile.GB200, 32000, 1000, 2.0, 10, 2.0)


def test_the_grid_is_the_issues_108_cells() -> None:
    cells = build_cells()
    assert len(cells) == 2 * 3 * 3 * 3 * 2 == len({c.key for c in cells})
    assert {c.system for c in cells} == {"gb200", "b200_sxm", "h200_sxm"}
    assert CELL.key == "gpt-oss-120b/gb200/32000-1000/tpot10/r2" and CELL in cells


def test_the_frontier_keeps_what_nothing_beats_on_both_axes() -> None:
    points = [(10.0, 100.0), (20.0, 80.0), (15.0, 70.0), (30.0, 20.0), (20.0, 60.0)]
    assert find_frontier(points) == [(10.0, 100.0), (20.0, 80.0), (30.0, 20.0)]


def test_the_gain_compares_each_disaggregated_point_with_a_real_aggregated_one() -> None:
    aggregated = [(10.0, 100.0), (20.0, 50.0)]
    # At 60 tokens/s/GPU only the aggregated point at 100 reaches that throughput: 40 / 10;
    # at 40, the one at 50 does: 30 / 20. Beyond any aggregated throughput: no rival.
    disaggregated = [(40.0, 60.0), (30.0, 40.0), (5.0, 120.0)]
    assert find_largest_gain(disaggregated, aggregated) == Gain(4.0, 60.0, 40.0, 10.0)
    assert find_largest_gain([(5.0, 120.0)], aggregated) is None


def pick(gpus: int, **extra: Any) -> dict[str, Any]:
    return {"gpus": gpus, "name": "x", "mode": "aggregated", **extra}


@pytest.mark.parametrize(
    ("tandem", "aic", "disagrees"),
    [(3, 3, False), (3, 4, True), (3, 5, True), (8, 9, False), (8, 10, True), (None, 2, True)],
)
def test_a_disagreement_is_more_than_one_gpu_or_more_than_15_percent(
    tandem: int | None, aic: int, disagrees: bool
) -> None:
    verdict = Verdict(CELL, None if tandem is None else pick(tandem), pick(aic), None, None)
    assert verdict.disagrees is disagrees


def test_each_disagreement_is_explained_from_what_the_other_judge_said() -> None:
    fewer_aic = Verdict(
        CELL, pick(5), pick(2, workers=2, tp=1, bs=12), None,
        {"meets": False, "ttft_p90_s": 0.5, "itl_p90_s": 0.0123},
    )  # fmt: skip
    assert "ITL p90 12.3 ms > 10 ms" in explain(fewer_aic)
    disaggregated = pick(3, mode="disaggregated")
    granular = Verdict(CELL, disaggregated, pick(8), {"meets": True, "reaches_rate": True}, None)
    assert "this one has 3" in explain(granular)
    slower = {"meets": False, "reaches_rate": True, "ttft_ms": 900.0, "tpot_ms": 12.5}
    assert "TPOT 12.5 ms > 10 ms" in explain(Verdict(CELL, pick(3), pick(6), slower, None))


def test_the_summary_counts_cells_where_both_picked() -> None:
    verdicts = [
        Verdict(CELL, pick(2), pick(3), {"meets": True}, {"meets": False}),
        Verdict(CELL, pick(4), pick(3), {"meets": False}, {"meets": True}),
        Verdict(CELL, None, pick(3), None, {"meets": True}),
    ]
    s = summarize(verdicts)
    assert (s.both_pick, s.fewer_or_equal, s.estimated, s.meets_under_aic) == (2, 1, 2, 1)
    assert (s.replayed, s.aic_meets_in_tandem) == (3, 2)
    assert (s.aic_holds, s.fewer_or_equal_held) == (1, 0)  # the second: 4 GPUs against 3


def test_tandem_picks_go_to_the_estimator_as_deployments() -> None:
    aggregated = {"mode": "aggregated", "decode_workers": 3, "decode_tp": 1, "max_num_tokens": None}
    assert as_deployment(aggregated) == {
        "mode": "agg",
        "workers": 3,
        "tp": 1,
        "max_num_tokens": 8192,
    }
    split = {"mode": "disaggregated", "prefill_workers": 1, "prefill_tp": 2, "decode_workers": 1,
             "decode_tp": 1}  # fmt: skip
    assert as_deployment(split) == {"mode": "disagg", "prefill_workers": 1, "prefill_tp": 2,
                                    "decode_workers": 1, "decode_tp": 1}  # fmt: skip


def test_another_tools_pick_replays_as_it_was_given() -> None:
    light = Cell("gpt-oss-20b", AcceleratorProfile.GB200, 1000, 1000, 0.5, 20, 2.0)
    aggregated = replay_pick(light, {"workers": 1, "tp": 1, "dp": 1, "bs": 32, "ctx_tokens": 2000})
    assert aggregated["name"] == "aggregated, 1 TP1 worker, 2000 tokens/step, batch <= 32"
    assert aggregated["meets"] and aggregated["stopped"] is None
    with_dp = {"workers": 1, "tp": 1, "dp": 2, "bs": 32, "ctx_tokens": 2000}
    assert "attention data parallelism" in replay_pick(light, with_dp)["error"]
