"""The committed gRPC stubs are what protoc makes from worker.proto today.

protoc runs in a child process: grpc_tools links its own protobuf runtime, which aborts
when loaded into a process that already imported the upb-based one (as pytest has here).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tandem.proto import build


def _check(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tandem.proto.build", "--check", "--dir", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_committed_stubs_are_fresh() -> None:
    done = _check(build.HERE)
    assert done.returncode == 0, done.stderr


def test_check_catches_a_stale_stub(tmp_path: Path) -> None:
    copy = tmp_path / "proto"
    shutil.copytree(build.HERE, copy)
    stub = copy / "worker_pb2.pyi"
    stub.write_text(stub.read_text() + "\n# edited by hand\n")
    done = _check(copy)
    assert done.returncode == 1
    assert "worker_pb2.pyi" in done.stderr
