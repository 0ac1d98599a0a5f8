"""Loads the fake pynvml (fake_nvml.py) for the telemetry tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="session")
def fake_nvml() -> ModuleType:
    path = Path(__file__).with_name("fake_nvml.py")
    spec = importlib.util.spec_from_file_location("tandem_tests_fake_nvml", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return module
