"""Golden files: rendered output compared with a committed file.

Regenerate after an intended change with ``TANDEM_UPDATE_GOLDEN=1 pytest tests/unit`` and
review the diff: the files pin the operator <-> pod contract and the chart's output.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).parent / "golden"


def _assert_golden(name: str, text: str) -> None:
    path = GOLDEN_DIR / name
    if os.environ.get("TANDEM_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    if not path.exists():
        pytest.fail(f"{path} is missing; run with TANDEM_UPDATE_GOLDEN=1 to create it")
    assert text == path.read_text(), f"{name} differs from its golden file"


@pytest.fixture
def assert_golden() -> Callable[[str, str], None]:
    return _assert_golden
