"""Version skew: a frontend refuses a config document of a newer contract in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tandem.api.validate import load_inference_cluster
from tandem.frontend.config import CONTRACT_VERSION, load_frontend_config, render_frontend_config

EXAMPLE = Path(__file__).parents[3] / "manifests" / "examples" / "reference-cpu.yaml"


def write(tmp_path: Path, **changes: object) -> Path:
    doc = render_frontend_config(load_inference_cluster(EXAMPLE), {"decode": "127.0.0.1:1"})
    path = tmp_path / "frontend.json"
    path.write_text(json.dumps({**doc, **changes}))
    return path


def test_the_current_contract_loads(tmp_path: Path) -> None:
    assert load_frontend_config(write(tmp_path)).contract_version == CONTRACT_VERSION


def test_a_newer_contract_is_refused_by_its_version_not_its_fields(tmp_path: Path) -> None:
    # A newer operator may reshape fields: the version is what the one line names.
    path = write(tmp_path, contractVersion=CONTRACT_VERSION + 1, model="reshaped")
    with pytest.raises(ValueError) as refused:
        load_frontend_config(path)
    assert str(refused.value) == (
        f"{path}: contractVersion {CONTRACT_VERSION + 1} is not supported (this frontend "
        f"reads version {CONTRACT_VERSION}; run a frontend image as new as the operator)"
    )
