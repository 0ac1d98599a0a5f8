"""``tandem profile`` then ``tandem plan --perf-table`` on a tiny reference model, in
process: the table records what was measured and plans; mistakes are one line (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.cli.main import main
from tandem.perf.table import load_perf_table

EXAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "examples"
TINY_SPEC = """\
apiVersion: tandem.dev/v1alpha1
kind: InferenceCluster
metadata: {name: tiny}
spec:
  model: {name: tandem/tiny-reference}
  engine:
    kind: reference
    options: {num_layers: 2, hidden: 32, num_heads: 2, num_kv_heads: 1, head_dim: 16,
              intermediate: 64, sliding_window: 32, kv_block_size: 8, num_kv_blocks: 64}
  accelerator: {profile: cpu}
  decode:
    engineOptions: {num_kv_blocks: 160}
"""
WORKLOAD = ["--isl", "100", "--osl", "4", "--rate", "0.1", "--ttft-p90", "10",
            "--itl-p90-ms", "1000", "--requests", "20"]  # fmt: skip


def one_error(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and len(lines) == 1 and lines[0].startswith("error: "), captured
    return lines[0]


def test_profile_then_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY_SPEC)
    table_path = tmp_path / "table.json"
    assert main(["profile", "-f", str(spec), "-o", str(table_path),
                 "--longest-prompt", "200", "--repeats", "1"]) == 0  # fmt: skip
    progress = capsys.readouterr().err
    assert "prompts [128, 200], batches [1, 2, 4], 1 repeats each" in progress
    assert f"wrote {table_path}" in progress
    table = load_perf_table(table_path)
    assert table.model == "tandem/tiny-reference"
    assert table.source.startswith("tandem profile, ")
    # The decode pool's engine was measured: its 160 blocks, not the spec-wide 64.
    assert table.worker is not None
    assert table.worker.kv_pool_bytes == 160 * 8 * 2 * 16 * 4
    assert (table.worker.architecture.num_layers, table.worker.architecture.sliding_layers) == (
        2, 1,
    )  # fmt: skip

    code = main(["plan", "-f", str(spec), "--perf-table", str(table_path), *WORKLOAD])
    out = capsys.readouterr().out
    # Whether the deployment meets the SLO is this machine's to say; what it planned
    # from is not.
    assert code in (0, 1), out
    assert "step times: table: tandem profile, " in out


def test_mistakes_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    simulated = str(EXAMPLES / "simulated-gpt-oss-120b-gb200.yaml")
    assert main(["profile", "-f", simulated]) == 2
    assert one_error(capsys) == (
        "error: spec.engine.kind: tandem profile measures the reference engine, not "
        "'simulated' (simulated and trtllm plans read step-time databases)"
    )
    reference = str(EXAMPLES / "reference-cpu.yaml")
    assert main(["plan", "-f", reference, *WORKLOAD]) == 2
    assert "`tandem profile -f FILE -o table.json`" in one_error(capsys)
    missing = tmp_path / "missing.json"
    assert main(["plan", "-f", reference, "--perf-table", str(missing), *WORKLOAD]) == 2
    assert one_error(capsys) == (
        f"error: --perf-table: cannot read performance table {missing}: No such file or directory"
    )
    with pytest.raises(SystemExit) as usage:
        main(["profile", "-f", reference, "--repeats", "0"])
    assert usage.value.code == 2
    assert "argument --repeats: must be >= 1" in one_error(capsys)
