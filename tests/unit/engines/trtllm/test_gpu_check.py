"""The prepared GPU check (dev/tandem_dev/gpu_check.py, scripts/gpu-check.sh) on CPU.

Without a GPU both must say "no GPU: skipped" and exit 3, never 0. The check's own code
runs here too: the NIXL transfer over NIXL's real UCX backend with DRAM in place of VRAM,
and the engine check against the fake TensorRT-LLM, so on a GPU only the memory kind and
the engine underneath differ.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from tandem_dev import gpu_check

SCRIPT = Path(__file__).resolve().parents[4] / "scripts" / "gpu-check.sh"


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A PATH whose nvidia-smi finds no GPU, as on a node without a driver."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    return tmp_path


def test_without_a_gpu_the_module_says_skipped_and_fails(
    no_gpu: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gpu_check.main(["--model", str(no_gpu)]) == gpu_check.NO_GPU != 0
    assert "no GPU: skipped" in capsys.readouterr().out


def test_without_a_gpu_the_script_says_skipped_before_any_container(no_gpu: Path) -> None:
    done = subprocess.run([SCRIPT, str(no_gpu)], capture_output=True, text=True, check=False)
    assert done.returncode == gpu_check.NO_GPU
    assert "no GPU: skipped" in done.stdout


def test_on_a_gpu_node_the_script_runs_the_check_in_the_image(no_gpu: Path, tmp_path: Path) -> None:
    (no_gpu / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: NVIDIA B200 (UUID: x)'\n")
    # A docker that prints the command it was given.
    (no_gpu / "docker").write_text('#!/bin/sh\necho "docker $*"\n')
    (no_gpu / "docker").chmod(0o755)
    model = tmp_path / "model"
    model.mkdir()
    argv = [SCRIPT, str(model), "img:1", "--", "--vocab-size", "5"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    assert words[:4] == ["docker", "run", "--gpus", "all"]
    assert f"{model}:/model:ro" in words
    assert f"{SCRIPT.parents[1]}/dev:/opt/tandem-dev:ro" in words
    check = ["-m", "tandem_dev.gpu_check", "--model", "/model", "--vocab-size", "5"]
    assert words[-9:] == ["--entrypoint", "python3", "img:1", *check]


def test_the_script_needs_a_model() -> None:
    done = subprocess.run([SCRIPT], capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "usage:" in done.stderr


def test_gpus_are_counted_from_nvidia_smi(no_gpu: Path) -> None:
    assert gpu_check.gpu_count() == 0
    (no_gpu / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 (UUID: x)'\n")
    assert gpu_check.gpu_count() == 1


def test_the_nixl_transfer_copies_the_bytes_over_ucx() -> None:
    verdict = gpu_check.nixl_transfer("DRAM", nbytes=1 << 20)
    assert verdict.ok, verdict.line()
    assert verdict.line().startswith("nixl DRAM: PASS - 1 MiB in ")


def test_a_transfer_that_raises_is_a_failed_verdict() -> None:
    # VRAM without torch and CUDA here: the error becomes the verdict, not a traceback.
    verdict = gpu_check.nixl_transfer("VRAM", nbytes=1 << 10)
    assert not verdict.ok
    assert verdict.line().startswith("nixl VRAM: FAIL - ")


def test_the_engine_check_runs_a_handoff_on_the_fake(
    fake_trtllm: ModuleType, no_gpu: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--allow-no-gpu", "--mem", "DRAM", "--model", "/models/gpt-oss-20b"]
    assert gpu_check.main(argv) == 0
    out = capsys.readouterr().out
    assert "trtllm engine: PASS - prefill -> decode handoff" in out
    assert out.rstrip().endswith("gpu-check: all checks passed")


def test_an_engine_that_cannot_start_is_a_failed_verdict(fake_trtllm: ModuleType) -> None:
    verdict = gpu_check.trtllm_engine({"model": "/models/not-in-the-catalogue"})
    assert not verdict.ok
    assert "vocab_size" in verdict.detail
