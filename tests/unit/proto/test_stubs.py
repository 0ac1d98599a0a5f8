"""The committed gRPC stubs are what protoc makes from worker.proto today."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tandem.proto import build


def test_committed_stubs_are_fresh() -> None:
    assert build.main(["--check"]) == 0


def test_check_catches_a_stale_stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "proto"
    shutil.copytree(build.HERE, copy)
    stub = copy / "worker_pb2.pyi"
    stub.write_text(stub.read_text() + "\n# edited by hand\n")
    monkeypatch.setattr(build, "HERE", copy)
    assert build.main(["--check"]) == 1
