"""The adaptive section's pure parts, on inputs small enough to judge by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.api.v1alpha1 import InferenceCluster, PlanningMode
from tandem.runtime.planning_record import PlanningRecord
from tandem.sim.metrics import Slo
from tandem.sim.planner import Candidate
from tandem_dev.autoscale_sim.traces import Arrival, generate_arrivals
from tandem_dev.bench.adaptive.judge import RowFigures, judge_row, judge_targets
from tandem_dev.bench.adaptive.report import TraceRows, plot_attainment, render_report
from tandem_dev.bench.adaptive.rows import (
    TraceLoads,
    average_workload,
    build_aic_request,
    choose_aic,
    deploy_time_workload,
    peak_workload,
    render_planned,
    render_static,
)
from tandem_dev.bench.adaptive.traces import build_adaptive_traces
from tandem_dev.bench.autoscale_live.replay import LiveRun, Served, WorkerSample

SLO = Slo(ttft_p90_s=2.0, itl_p90_s=0.006)


def test_the_traces_are_the_issues_five_and_the_drift_ends_in_long_prompts() -> None:
    traces = {t.name: t for t in build_adaptive_traces(120)}
    assert list(traces) == ["chat", "rag", "bursty", "ramp", "drift"]
    drift = traces["drift"]
    assert drift.load_at(1).mean_prompt_tokens == 1024
    assert drift.load_at(119).mean_prompt_tokens == 32768
    arrivals = generate_arrivals(drift, 7)
    assert arrivals[0].prompt_tokens == 1024 and arrivals[-1].prompt_tokens == 32768
    # The ramp's peak is six times its trough: more GPUs than its first quarter needs.
    ramp = traces["ramp"]
    assert ramp.load_at(1).requests_per_second * 6 == ramp.load_at(60).requests_per_second


def test_the_average_workload_is_the_median_prompt_and_the_mean_rate_rounded_up() -> None:
    arrivals = [Arrival(t, 1024 if t < 7 else 32768, 64) for t in range(10)]
    workload = average_workload(arrivals, 4.0)  # 2.5 req/s
    assert (workload.isl, workload.isl_p90, workload.osl) == (1024, 32768, 64)
    assert workload.isl_mean == round((7 * 1024 + 3 * 32768) / 10)
    assert workload.requests_per_second == 2.5
    assert average_workload(arrivals, 3.0).requests_per_second == 3.4  # 3.33.. up


def test_the_planning_row_deploys_for_the_traces_first_quarter() -> None:
    # 1k prompts at 2 req/s for 10 s, then 32k ones at 4 req/s: deployed for the first.
    arrivals = [Arrival(i * 0.5, 1024, 64) for i in range(20)]
    arrivals += [Arrival(10 + i * 0.25, 32768, 64) for i in range(120)]
    deployed = deploy_time_workload(arrivals, 40.0)
    assert (deployed.isl, deployed.isl_p90, deployed.requests_per_second) == (1024, 1024, 2.0)
    assert average_workload(arrivals, 40.0).isl == 32768


def test_the_peak_is_the_traces_busiest_eighth_a_bursts_mix_and_rate() -> None:
    bursty = next(t for t in build_adaptive_traces(120) if t.name == "bursty")
    arrivals = generate_arrivals(bursty, 7)
    peak = peak_workload(arrivals, 120)
    # 15 s inside a burst: 1k and 32k prompts at 3 req/s each, about half each, the
    # stretch where Poisson arrivals brought the most (seeded: 59 long of 112, 7.5 req/s).
    assert peak.isl_p90 == 32768
    counts = dict(peak.isl_counts)
    assert set(counts) == {1024, 32768} and 0.35 < counts[32768] / sum(counts.values()) < 0.65
    assert 6 <= peak.requests_per_second <= 8
    assert peak.requests_per_second > 1.2 * average_workload(arrivals, 120).requests_per_second
    # A steady trace's peak is its average load, give or take its arrivals' noise.
    chat = next(t for t in build_adaptive_traces(120) if t.name == "chat")
    steady = generate_arrivals(chat, 7)
    assert peak_workload(steady, 120).isl == average_workload(steady, 120).isl == 1024
    assert peak_workload(steady, 120).requests_per_second < 2 * 3


def test_rows_render_valid_clusters_static_fixed_and_planned_auto() -> None:
    workload = average_workload([Arrival(0, 1024, 64)], 1.0)
    static = InferenceCluster.model_validate(
        render_static("s", workload, "b200", Candidate(1, 2, 1, 1, max_num_tokens=4096))
    )
    assert (static.spec.prefill.max_replicas, static.spec.decode.replicas) == (1, 2)
    assert not static.spec.autoscaling.enabled
    assert static.spec.accelerator.profile == "b200"
    assert static.spec.engine.options.as_dict()["max_num_tokens"] == 4096
    planned = InferenceCluster.model_validate(render_planned("p", workload, "gb200"))
    assert planned.spec.planning.mode is PlanningMode.AUTO
    assert planned.spec.autoscaling.enabled


def test_a_rows_figures_count_gpu_seconds_goodput_and_its_rollouts() -> None:
    run = LiveRun(
        served=[
            Served(0, 0, 0.5, 0.5 + 0.005 * 9, 10, 1024),  # within
            Served(1, 1, 4.0, 4.5, 10, 1024),  # TTFT 3 s: missed
            Served(2, 2, None, 2.1, 0, 0, "APIError"),
        ],
        samples=[WorkerSample(0, 1, 1), WorkerSample(5, 0, 1)],
    )
    planning = PlanningRecord(shape="1(TP1) agg", rollouts=1)
    figures = judge_row(run, 10.0, SLO, planning, "planned")
    assert figures.attainment == pytest.approx(1 / 3)
    assert figures.gpu_seconds == 15  # 2 workers for 5 s, then 1 for 5 s
    assert figures.goodput_per_gpu == pytest.approx(10 / 15)
    assert (figures.requests, figures.failed) == (3, 1)
    assert (figures.rollouts, figures.replans, figures.shape) == (1, None, "1(TP1) agg")


def _figures(attainment: float, gpu_seconds: float) -> RowFigures:
    return RowFigures(attainment, gpu_seconds, 0.0, 100, 0, None, None, "")


def test_planning_must_meet_95_percent_on_at_most_0_8x_the_cheapest_static_that_does() -> None:
    rows = {
        "static aggregated": _figures(0.99, 1000),
        "static disaggregated": _figures(0.96, 800),  # the cheapest that meets: the bar
        "planning auto": _figures(0.97, 640),  # 0.8x
    }
    assert judge_targets("bursty", rows).startswith("met: 97.0% within SLO on 0.80x")
    assert "static disaggregated (96.0%)" in judge_targets("bursty", rows)
    rows["planning auto"] = _figures(0.97, 700)
    assert judge_targets("bursty", rows).startswith("missed")
    assert judge_targets("chat", rows).startswith("met")  # steady: within 1.05x
    rows["planning auto"] = _figures(0.94, 500)
    assert judge_targets("chat", rows).startswith("missed")


def test_the_static_row_for_the_peak_is_the_bar_where_the_average_ones_miss() -> None:
    rows: dict[str, RowFigures | str] = {
        "static disaggregated": _figures(0.55, 240),
        "static for the peak": _figures(0.97, 360),
        "planning auto": _figures(0.96, 280),
    }
    assert judge_targets("bursty", rows).startswith("met: 96.0% within SLO on 0.78x")
    assert "static for the peak (97.0%)" in judge_targets("bursty", rows)


def test_when_no_static_meets_planning_must_serve_more_on_no_more_gpu_seconds() -> None:
    rows: dict[str, RowFigures | str] = {
        "static aggregated": _figures(0.80, 900),
        "static disaggregated": "none meets the SLO within the budget",
    }
    rows["planning auto"] = _figures(0.90, 900)
    assert judge_targets("drift", rows).startswith("met (more served")
    rows["planning auto"] = _figures(0.90, 950)
    assert judge_targets("drift", rows).startswith("missed")
    assert judge_targets("drift", {"planning auto": "not run"}).startswith("not judged")


def test_the_plot_is_written_with_a_panel_per_trace(tmp_path: Path) -> None:
    traces = build_adaptive_traces(120)[:2]
    workload = average_workload([Arrival(0, 1024, 64)], 1.0)
    rows: list[tuple[str, RowFigures | str]] = [
        ("static aggregated", _figures(0.99, 100)),
        ("planning auto", "not run"),
    ]
    path = tmp_path / "img" / "adaptive-gb200.png"
    plot_attainment(
        path,
        [TraceRows("gb200", t, TraceLoads(workload, workload, workload), rows) for t in traces],
    )
    assert path.read_bytes().startswith(b"\x89PNG")


def test_the_report_links_each_hardwares_plot() -> None:
    trace = build_adaptive_traces(120)[0]
    workload = average_workload([Arrival(0, 1024, 64)], 1.0)
    rows: list[tuple[str, RowFigures | str]] = [
        ("planning auto", _figures(0.99, 100)),
        (
            "AIConfigurator disaggregated",
            "AIConfigurator picks 2P(TP1)+3D(TP1): outside the budget",
        ),
    ]
    results = [
        TraceRows(p, trace, TraceLoads(workload, workload, workload), rows)
        for p in ("gb200", "b200")
    ]
    report = render_report(results, 120, 9, None)
    assert report.endswith(
        "![attainment vs GPU-seconds, GB200](img/adaptive-gb200.png)\n\n"
        "![attainment vs GPU-seconds, B200](img/adaptive-b200.png)"
    )
    # A run of some traces has plots of its own: the whole run's stay as they were.
    assert render_report(results[:1], 120, 9, ["chat"]).endswith("(img/adaptive-gb200-chat.png)")
    assert "**chat, B200**" in report and "Target: not judged" in report
    assert (
        "| AIConfigurator disaggregated | AIConfigurator picks 2P(TP1)+3D(TP1): outside" in report
    )


def test_aiconfigurator_is_asked_for_the_mean_prompt_under_the_same_slo() -> None:
    arrivals = [Arrival(t, 1024 if t < 7 else 32768, 64) for t in range(10)]
    item = build_aic_request("gb200/bursty", "gb200", average_workload(arrivals, 4.0))
    assert item == {
        "id": "gb200/bursty",
        "model": "openai/gpt-oss-120b",
        "system": "gb200",
        "isl": 10547,
        "osl": 64,
        "ttft_ms": 2000.0,
        "tpot_ms": 6.0,
        "rate": 2.5,
    }


def _aic_agg(workers: int, tp: int = 1) -> dict[str, object]:
    """An aggregated pick as the driver writes it (``aic_driver.agg_pick``)."""
    return {"workers": workers, "tp": tp, "dp": 1, "bs": 16, "ctx_tokens": 8192}


def _aic_disagg(prefill: int, decode: int) -> dict[str, object]:
    return {"prefill_workers": prefill, "prefill_tp": 1, "prefill_dp": 1,
            "decode_workers": decode, "decode_tp": 1, "decode_dp": 1, "decode_bs": 32}  # fmt: skip


def test_aiconfigurators_picks_run_as_picked_where_they_fit_the_budget() -> None:
    document = render_static(
        "s", average_workload([Arrival(0, 1024, 64)], 1.0), "gb200", Candidate(0, 1, 1, 1)
    )
    document["spec"]["prefill"]["maxReplicas"] = 4  # the section's budget: 4P + 2D
    document["spec"]["decode"]["maxReplicas"] = 2
    chosen = choose_aic(document, {"agg": _aic_agg(2), "disagg": _aic_disagg(1, 1)})
    assert chosen == {
        "AIConfigurator aggregated": Candidate(0, 2, 1, 1, 8192, 16),
        "AIConfigurator disaggregated": Candidate(1, 1, 1, 1, max_batch_size=32),
    }
    chosen = choose_aic(document, {"agg": _aic_agg(1, tp=2), "disagg": _aic_disagg(1, 3)})
    assert chosen == {
        "AIConfigurator aggregated": "AIConfigurator picks 1(TP2) agg: outside the budget",
        "AIConfigurator disaggregated": "AIConfigurator picks 1P(TP1)+3D(TP1): outside the budget",
    }
    chosen = choose_aic(document, {"agg": None, "disagg": None, "error": "no config meets TTFT"})
    assert set(chosen.values()) == {"AIConfigurator finds none (no config meets TTFT)"}


def test_an_aiconfigurator_row_is_a_static_bar_for_planning() -> None:
    rows: dict[str, RowFigures | str] = {
        "static aggregated": _figures(0.99, 1000),
        "AIConfigurator aggregated": _figures(0.96, 600),
        "planning auto": _figures(0.97, 620),
    }
    assert judge_targets("chat", rows).startswith(
        "met: 97.0% within SLO on 1.03x the GPU-seconds of AIConfigurator aggregated"
    )
