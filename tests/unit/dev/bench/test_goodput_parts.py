"""The goodput benchmark's pure parts: exact-ISL prompts, the cluster it starts, the
aiperf command and export it reads, steady-state throughput and goodput."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tandem.api.v1alpha1 import InferenceCluster
from tandem.engines.simulated.pacing import Pacer
from tandem.perf.ideal import IdealPoint
from tandem.sim.metrics import Percentiles, Slo, compute_percentiles
from tandem.tokenization import ChatMessage
from tandem.tokenization.harmony import load_harmony_tokenizer
from tandem_dev.bench.goodput import grid
from tandem_dev.bench.goodput.aiperf import AiperfRun, parse_export, read_records, render_command
from tandem_dev.bench.goodput.points import (
    Point,
    Record,
    Split,
    compute_ratio,
    compute_steady_throughput,
    find_goodput,
)
from tandem_dev.bench.goodput.report import compute_frontier, plot_pareto
from tandem_dev.bench.goodput.stack import read_pacing, render_cluster
from tandem_dev.bench.goodput.workload import build_prompt


def point(split: Split, c: int, ttft: float, itl: float, tps: float, user: float) -> Point:
    return Point("model", "gb200", 32768, 1024, split, c, Percentiles(ttft, ttft, ttft),
                 Percentiles(itl, itl, itl), tps, user, 10)  # fmt: skip


@pytest.mark.parametrize("isl", [64, 1024, 32768])
def test_prompts_render_to_exactly_the_isl(isl: int) -> None:
    tokenizer = load_harmony_tokenizer()
    for index in (0, 7, 12345):
        text = build_prompt(tokenizer, isl, index)
        assert len(tokenizer.apply_chat_template([ChatMessage("user", text)])) == isl
    with pytest.raises(ValueError, match="shorter than the chat framing"):
        build_prompt(tokenizer, 10, 0)


def test_the_cluster_is_a_valid_simulated_deployment() -> None:
    doc = render_cluster("gp-x", "b200", Split(1, 3), 0.5)
    cluster = InferenceCluster.model_validate(doc)
    assert cluster.spec.engine.kind.value == "simulated"
    assert cluster.spec.engine.options.as_dict()["speedup"] == 0.5
    assert (cluster.spec.prefill.replicas, cluster.spec.decode.replicas) == (1, 3)
    assert cluster.spec.accelerator.profile.value == "b200"
    agg = InferenceCluster.model_validate(render_cluster("gp-y", "gb200", Split(0, 4), 1, 1024))
    assert agg.spec.prefill.replicas == 0 and agg.spec.decode.max_replicas == 4
    assert agg.spec.engine.options.as_dict()["max_num_tokens"] == 1024
    assert "max_num_tokens" not in cluster.spec.engine.options.as_dict()


def test_aiperf_command_and_export(tmp_path: Path) -> None:
    run = AiperfRun("http://127.0.0.1:9", tmp_path / "p.jsonl", tmp_path / "tok", 16, 40, 2.5,
                    tmp_path / "out", 300)  # fmt: skip
    argv = render_command(run, Path("aiperf"))
    flags = dict(zip(argv[2::2], argv[3::2], strict=False))
    assert argv[:2] == ["aiperf", "profile"]
    assert flags["--concurrency"] == "16" and flags["--request-count"] == "40"
    assert flags["--concurrency-ramp-duration"] == "2.500"
    assert "--use-server-token-count" in argv and "--streaming" in argv
    # Wall milliseconds at speed-up 0.5 -> modelled seconds: x 0.5 / 1000.
    data = {
        "time_to_first_token": {"p50": 100.0, "p90": 200.0, "p99": 300.0},
        "inter_token_latency": {"p50": 10.0, "p90": 12.0, "p99": 20.0},
        "output_token_throughput_per_user": {"p50": 100.0},
        "request_count": {"avg": 4},
        "error_request_count": {"avg": 1},
    }
    # 10 tokens per wall second each from the first token: r0 ends at 1.1 (the steady
    # window opens), r3 starts at 3.0 (it closes). In [1.1, 3.0]: r1 emits 1.9 s (19
    # tokens), r2 1.8 s (18): 37 tokens in 1.9 wall s, x 2 per modelled second.
    records = [
        Record(0.0, 0.1, 1.1, 10),
        Record(0.5, 0.6, 3.6, 30),
        Record(1.1, 1.2, 4.2, 30),
        Record(3.0, 3.1, 6.1, 30),
    ]
    p = parse_export(data, records, profile="gb200", isl=1024, osl=1024, split=Split(2, 2),
                     concurrency=2, speedup=0.5)  # fmt: skip
    assert p.ttft == Percentiles(0.05, 0.1, 0.15) and p.itl.p90 == pytest.approx(0.006)
    assert p.tokens_per_second_per_user == 200.0  # 100 per wall second = 200 per modelled
    assert (p.requests, p.errors) == (4, 1)
    assert p.tokens_per_second == pytest.approx(37 / 1.9 / 0.5)
    lines = [
        {"metadata": {"request_start_ns": 1_000_000_000, "request_end_ns": 3_000_000_000},
         "metrics": {"time_to_first_token": {"value": 500.0},
                     "output_sequence_length": {"value": 21}}},
        {"metadata": {"request_start_ns": 1, "request_end_ns": 2}, "metrics": {}},  # failed
    ]  # fmt: skip
    (tmp_path / "records.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    assert read_records(tmp_path / "records.jsonl") == [Record(1.0, 1.5, 3.0, 21)]
    # Inter-chunk latency: each gap of the stream, milliseconds -> seconds.
    chunks = {"value": [0.0, 4.0, 6.0], "unit": "ms"}
    lines[0] = {**lines[0], "metrics": {**lines[0]["metrics"], "inter_chunk_latency": chunks}}
    (tmp_path / "records.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    assert read_records(tmp_path / "records.jsonl")[0].gaps == (0.0, 0.004, 0.006)


def test_steady_throughput_needs_a_window_past_the_ramp() -> None:
    records = [Record(0.0, 1.0, 11.0, 100), Record(0.0, 1.0, 11.0, 100)]
    with pytest.raises(ValueError, match="never left its ramp"):
        compute_steady_throughput(records, 2)
    # Three requests, the last sent before any finished: no steady part.
    with pytest.raises(ValueError, match="no steady window"):
        compute_steady_throughput([*records, Record(5.0, 6.0, 16.0, 100)], 2)


def test_goodput_is_the_best_point_within_the_slo() -> None:
    slo = Slo(2.0, 0.006)
    agg, dis = Split(0, 4), Split(2, 2)
    points = [
        point(agg, 8, 1.0, 0.004, 2000.0, 250),
        point(agg, 16, 1.5, 0.007, 3000.0, 140),  # ITL too slow
        point(dis, 16, 1.0, 0.005, 3600.0, 200),
        point(dis, 32, 2.5, 0.005, 4400.0, 200),  # TTFT too slow
    ]
    best_agg = find_goodput([p for p in points if p.split.aggregated], slo)
    best_dis = find_goodput([p for p in points if not p.split.aggregated], slo)
    assert best_agg is points[0] and best_dis is points[2]
    assert compute_ratio(best_dis, best_agg) == pytest.approx(1.8)
    assert find_goodput([points[1]], slo) is None and compute_ratio(None, best_agg) is None
    assert [p.concurrency for p in compute_frontier(points)] == [8, 32]


def test_percentiles_and_speedup_choice() -> None:
    assert compute_percentiles([float(i) for i in range(101)]) == Percentiles(50, 90, 99)
    assert grid.choose_speedup(grid.PLUMBING_TOKENS_PER_WALL_S * 4) == pytest.approx(0.25)
    assert grid.choose_speedup(1.0) == grid.MAX_SPEEDUP


def test_pacing_lines_are_read_back(tmp_path: Path) -> None:
    """The line the simulated engine logs is the line the benchmark parses."""
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    pacer = Pacer(0.5, clock=lambda: now[0], sleep=sleep)
    pacer.finish_step(pacer.now(), 1.0, work_waited=False)  # 2 wall s
    early = pacer.describe()
    now[0] += 0.4  # the next step's work waited 0.4 s for the event loop
    pacer.finish_step(pacer.now(), 1.0, work_waited=True)
    logs = tmp_path / "clusters" / "c1" / "logs"
    logs.mkdir(parents=True)
    (logs / "decode-0.log").write_text(f"x {early}\nx {pacer.describe()}\n")
    (logs / "frontend.log").write_text("no pacing here\n")
    pacing = read_pacing(tmp_path, "c1")
    # 2 modelled s at 0.5 need 4 wall s; 0.4 s was plumbing: 10% (the last line counts).
    assert list(pacing) == ["decode-0"] and pacing["decode-0"].lag == pytest.approx(0.1)


def test_goodput_table_verdicts_and_sensitivity() -> None:
    from tandem.perf.ideal import IdealPoint
    from tandem_dev.bench.goodput.report import render_goodput, render_sensitivity

    slo = Slo(2.0, 0.006)
    agg, dis = Split(0, 4), Split(2, 2)
    # Tokens/s over 4 GPUs: 8000 -> 2000 per GPU, 12800 -> 3200, 20000 -> 5000.
    measured = [
        dataclasses.replace(point(agg, 8, 1.0, 0.005, 8000.0, 200), source="aiperf"),
        dataclasses.replace(point(dis, 16, 1.0, 0.005, 12800.0, 200), source="aiperf"),
    ]
    model = [point(agg, 8, 1.0, 0.005, 8000.0, 200), point(agg, 64, 1.0, 0.009, 20000.0, 110)]
    ideal = [IdealPoint(8, 0.005, 0.5, 4000.0), IdealPoint(64, 0.009, 1.0, 6000.0)]
    table = render_goodput([("gb200", 32768, slo, [*measured, *model], ideal)])
    # 3200 / 2000 = 1.6x agg, 3200 / 4000 = 0.8 of the ideal at ITL 6 ms: both targets met.
    assert "| 1.60x |" in table and "| 0.80x | met (>= 1.5x agg, >= 0.75 ideal) |" in table
    unmeasured = render_goodput([("b200", 32768, slo, model, ideal)])
    assert "| not measured | not measured | - |" in unmeasured
    sensitivity = render_sensitivity([("gb200", 32768, slo, model, ideal)])
    # ITL <= 6 ms: agg 2000 (c=8) vs ideal 4000; <= 10 ms: agg's best is the sweep's top
    # concurrency, so it is only a floor.
    assert "2,000 vs 4,000 (2.00x)" in sensitivity
    assert ">= 5,000 vs 6,000 (<= 1.20x)" in sensitivity


def test_the_pareto_plot_is_written_with_model_and_aiperf_points(tmp_path: Path) -> None:
    model = [
        point(Split(0, 4), 8, 1.0, 0.004, 2000.0, 250),
        point(Split(2, 2), 16, 1.0, 0.005, 3600.0, 200),
    ]
    measured = [dataclasses.replace(model[1], source="aiperf", tokens_per_second=3400.0)]
    ideal = [IdealPoint(8, 0.004, 0.5, 2500.0), IdealPoint(32, 0.008, 0.5, 5000.0)]
    image = plot_pareto(tmp_path / "img" / "p.png", "t", [*model, *measured], ideal,
                        Slo(2.0, 0.006))  # fmt: skip
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
