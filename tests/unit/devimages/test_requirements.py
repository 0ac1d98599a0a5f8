"""images/requirements.py: the requirement lines the Dockerfiles install first."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def requirements(*extras: str) -> list[str]:
    argv = [sys.executable, str(REPO / "images" / "requirements.py"), "pyproject.toml", *extras]
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=True)
    return result.stdout.splitlines()


def test_runtime_requirements_and_named_extras() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert requirements() == project["dependencies"]
    gpu = requirements("gpu")
    assert gpu == project["dependencies"] + project["optional-dependencies"]["gpu"]
    assert not any(line.startswith("pytest") for line in gpu)  # dev extras stay out
