"""AIConfigurator's driver (``aic_driver.py``) run beside this process, in its own venv
(``make bench`` installs it): the request written as JSON, the driver started on it, its
result read back when it is done. Used by the planners section and the adaptive one."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

AIC_PYTHON = Path(".bench/aiconfigurator/bin/python")
DRIVER = Path(__file__).with_name("aic_driver.py")


def require_aiconfigurator() -> None:
    if not AIC_PYTHON.exists():
        sys.exit(f"{AIC_PYTHON} is missing: `make bench` installs AIConfigurator there")


def start_driver(work: Path, phase: str, request: Mapping[str, Any]) -> subprocess.Popen[bytes]:
    work.mkdir(parents=True, exist_ok=True)
    (work / f"{phase}-request.json").write_text(json.dumps(request, indent=1))
    log = (work / f"{phase}.log").open("wb")
    return subprocess.Popen(
        [str(AIC_PYTHON), str(DRIVER), str(work / f"{phase}-request.json"),
         str(work / f"{phase}-result.json")],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def finish_driver(work: Path, phase: str, process: subprocess.Popen[bytes]) -> dict[str, Any]:
    if process.wait() != 0:
        sys.exit(f"AIConfigurator's driver failed ({phase}): see {work / f'{phase}.log'}")
    result: dict[str, Any] = json.loads((work / f"{phase}-result.json").read_text())
    return result
