"""``tandem plan`` with a workload: a recommendation with its numbers and a plot, an SLO
no GPU can meet said in one line (exit 1), incomplete or unplannable input (exit 2)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tandem.cli import plan, plan_workload
from tandem.sim.plan_document import PLAN_SCHEMA

EXAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "examples"
SIMULATED = str(EXAMPLES / "simulated-gpt-oss-120b-gb200.yaml")


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    plan.register(parser.add_subparsers())
    args = parser.parse_args(["plan", *argv])
    code: int = args.handler(args)
    return code


def test_recommends_with_the_numbers_and_a_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    image = tmp_path / "options.png"
    code = run("-f", SIMULATED, "--isl", "1024", "--osl", "32", "--rate", "4",
               "--ttft-p90", "0.5", "--itl-p90-ms", "5", "--requests", "40",
               "--plot", str(image))  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "SLO TTFT p90 <= 0.5 s, ITL p90 <= 5 ms" in out
    assert "recommended: " in out and "tokens/s/GPU" in out and "TTFT p50/p90/p99" in out
    # Counts read as counts ("1 deployment", "1 GPU", "2 GPUs").
    assert re.search(r"^  (1 deployment|\d+ deployments) simulated;", out, re.MULTILINE), out
    assert re.search(r"^recommended: .*, (1 GPU|\d+ GPUs)$", out, re.MULTILINE), out
    # 1k prompts stay under the example's disaggregation threshold: a decode target only.
    assert "autoscaling.decode.targetActiveSequencesPerReplica: " in out
    assert "targetTokensPerSecondPerReplica" not in out
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_disaggregated_recommendation_prints_targets_from_its_capacity(
    capsys: pytest.CaptureFixture[str],
) -> None:
    gb200 = str(EXAMPLES / "gpt-oss-120b-gb200.yaml")
    code = run("-f", gb200, "--isl", "32768", "--osl", "1024", "--rate", "8",
               "--ttft-p90", "2", "--itl-p90-ms", "6")  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    chosen = re.search(r"recommended: (\d+) prefill TP\d \+ \d+ decode TP\d workers", out)
    assert chosen is not None, out
    prefill = int(chosen.group(1))
    # 0.8x the prompt tokens/s over the prefill workers at the most the deployment serves
    # within the SLO (at least the planned 8 req/s), rounded down.
    target = re.search(
        r"autoscaling\.prefill\.targetTokensPerSecondPerReplica: (\d+)  # 0\.8 x ([\d.]+) req/s "
        rf"\(the most it serves within the SLO, [\d.]+x the planned rate\) x 32768 tokens / "
        rf"{prefill} prefill workers",
        out,
    )
    assert target is not None, out
    capacity = float(target.group(2))
    assert capacity >= 8
    assert int(target.group(1)) == int(0.8 * capacity * 32768 / prefill)
    assert "frontend.disaggregation.maxPrefillWaitSeconds: 2  # the TTFT target" in out


def test_an_slo_no_gpu_can_meet(capsys: pytest.CaptureFixture[str]) -> None:
    code = run("-f", SIMULATED, "--isl", "1024", "--osl", "256", "--rate", "1",
               "--ttft-p90", "1", "--itl-p90-ms", "1")  # fmt: skip
    assert code == plan_workload.EXIT_CANNOT
    assert "CANNOT MEET THE SLO: no deployment can: one sequence alone decodes at" in (
        capsys.readouterr().out
    )


def test_incomplete_or_unplannable_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("-f", SIMULATED, "--isl", "1024", "--rate", "1") == plan_workload.EXIT_INVALID
    assert "needs --osl, --ttft-p90, --itl-p90-ms too" in capsys.readouterr().err
    # A stall bound alone is part of a workload, not a capacity check.
    assert run("-f", SIMULATED, "--max-stall-ms", "30") == plan_workload.EXIT_INVALID
    assert "a workload needs --isl, --osl, --rate" in capsys.readouterr().err
    # So is a table to plan it from.
    assert run("-f", SIMULATED, "--perf-table", "t.json") == plan_workload.EXIT_INVALID
    assert "a workload needs --isl, --osl, --rate" in capsys.readouterr().err
    cpu = str(EXAMPLES / "reference-cpu.yaml")
    code = run("-f", cpu, "--isl", "1", "--osl", "1", "--rate", "1", "--ttft-p90", "1",
               "--itl-p90-ms", "9")  # fmt: skip
    assert code == plan_workload.EXIT_INVALID
    assert "spec.engine.kind: the reference engine has no step-time database" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        run("-f", SIMULATED, "--rate", "-1")


def _json_plan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = run("-f", SIMULATED, *argv, "--output", "json")
    out = capsys.readouterr().out
    document: dict[str, Any] = json.loads(out)  # stdout holds the document alone
    jsonschema.validate(document, PLAN_SCHEMA)
    return code, document


def test_json_output_is_the_text_recommendation_in_its_documented_schema(
    capsys: pytest.CaptureFixture[str],
) -> None:
    workload = ("--isl", "1024", "--osl", "32", "--rate", "4", "--ttft-p90", "0.5",
                "--itl-p90-ms", "5", "--requests", "40")  # fmt: skip
    assert run("-f", SIMULATED, *workload) == 0
    text = capsys.readouterr().out
    code, document = _json_plan(capsys, *workload)
    assert code == 0
    chosen = document["recommended"]
    gpus = "1 GPU" if chosen["gpus"] == 1 else f"{chosen['gpus']} GPUs"
    assert re.search(rf"^recommended: .*, {gpus}$", text, re.MULTILINE), text
    assert document["workload"] == {
        "isl": 1024, "osl": 32, "islP90": None, "oslP90": None, "requestsPerSecond": 4.0,
        "slo": {"ttftP90Seconds": 0.5, "itlP90Seconds": 0.005, "longestGapP90Seconds": None},
    }  # fmt: skip
    assert chosen["meetsSlo"] and chosen["ttftSeconds"]["p90"] <= 0.5
    assert chosen["itlSeconds"]["p90"] <= 0.005
    for clock in document["clockSources"]:
        assert f"step times: {clock}" in text
    # The runners-up are every other deployment simulated, none with fewer GPUs meeting.
    tried = len(re.findall(r"^  tried ", text, re.MULTILINE))
    assert len(document["runnersUp"]) == tried - 1
    assert not any(r["meetsSlo"] and r["gpus"] < chosen["gpus"] for r in document["runnersUp"])


def test_json_output_says_why_nothing_is_recommended(capsys: pytest.CaptureFixture[str]) -> None:
    code, document = _json_plan(capsys, "--isl", "1024", "--osl", "256", "--rate", "1",
                                "--ttft-p90", "1", "--itl-p90-ms", "1")  # fmt: skip
    assert code == plan_workload.EXIT_CANNOT
    assert document["recommended"] is None and document["runnersUp"] == []
    assert document["reason"].startswith("no deployment can: one sequence alone decodes at")


def test_json_output_needs_a_workload(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("-f", SIMULATED, "--output", "json") == plan_workload.EXIT_INVALID
    assert capsys.readouterr().err == (
        "error: --output json describes a recommendation: give a workload too (--isl, --osl, "
        "--rate, --ttft-p90, --itl-p90-ms)\n"
    )
