"""``tandem plan``: prints each pool's numbers, exits 1 when a pool does not fit."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tandem.cli import plan

EXAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "examples"

TOO_SMALL = """
apiVersion: tandem.dev/v1alpha1
kind: InferenceCluster
metadata: {name: too-small}
spec:
  model: {name: openai/gpt-oss-120b, maxInputTokens: 32768, maxOutputTokens: 1024}
  engine: {kind: trtllm}
  accelerator: {profile: h100}
  decode:
    engineOptions: {max_batch_size: 64}
"""


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    plan.register(parser.add_subparsers())
    args = parser.parse_args(["plan", *argv])
    code: int = args.handler(args)
    return code


def test_examples_fit(capsys: pytest.CaptureFixture[str]) -> None:
    files = [str(p) for p in sorted(EXAMPLES.glob("gpt-oss-*.yaml"))]
    assert run("-f", *files) == 0
    out = capsys.readouterr().out
    assert out.count("[ok  ]") == 2 * len(files)
    assert "gpt-oss-120b at TP4 on NVIDIA GB200" in out


def test_too_small_gpu_fails_with_the_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "small.yaml"
    manifest.write_text(TOO_SMALL)
    assert run("-f", str(manifest)) == plan.EXIT_UNFIT
    out = capsys.readouterr().out
    assert "[FAIL] decode" in out and "[ok  ] prefill" in out
    assert "64 sequences of 33,792 tokens need" in out
    assert "TP2 would fit" in out
    assert "DOES NOT FIT" in out


def test_invalid_engine_options_are_input_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(TOO_SMALL.replace("max_batch_size: 64", "max_batch_sizes: 64"))
    assert run("-f", str(manifest)) == plan.EXIT_INVALID
    assert "max_batch_sizes" in capsys.readouterr().err


def test_missing_file_is_an_input_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run("-f", "/nonexistent/cluster.yaml") == plan.EXIT_INVALID
    assert "cannot read" in capsys.readouterr().err
