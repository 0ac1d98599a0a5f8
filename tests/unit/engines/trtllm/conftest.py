"""Puts the fake ``tensorrt_llm`` (tests/fakes) on the import path for these tests only."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

FAKES = Path(__file__).resolve().parents[3] / "fakes"


@pytest.fixture
def fake_trtllm(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The fake package, imported fresh; removed from sys.modules afterwards."""
    monkeypatch.syspath_prepend(str(FAKES))
    _forget_trtllm()
    import tensorrt_llm

    yield tensorrt_llm
    _forget_trtllm()


def _forget_trtllm() -> None:
    for name in [n for n in sys.modules if n == "tensorrt_llm" or n.startswith("tensorrt_llm.")]:
        del sys.modules[name]
