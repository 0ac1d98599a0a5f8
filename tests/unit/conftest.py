"""Golden files: rendered output compared with a committed file.

Each test directory that uses ``assert_golden`` keeps its files in a ``golden/`` folder
beside its tests. Regenerate after an intended change with
``TANDEM_UPDATE_GOLDEN=1 pytest tests/unit`` and review the diff: the files pin the
operator <-> pod contract and the chart's output.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest


def _assert_golden(golden_dir: Path, name: str, text: str) -> None:
    path = golden_dir / name
    if os.environ.get("TANDEM_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    if not path.exists():
        pytest.fail(f"{path} is missing; run with TANDEM_UPDATE_GOLDEN=1 to create it")
    assert text == path.read_text(), f"{name} differs from its golden file"


@pytest.fixture
def assert_golden(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    golden_dir = request.path.parent / "golden"

    def check(name: str, text: str) -> None:
        _assert_golden(golden_dir, name, text)

    return check
