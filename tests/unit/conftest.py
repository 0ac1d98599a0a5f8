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
from typing import Any

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


EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples"


def _rendered_pod_specs(example: str, settings: Any) -> list[dict[str, Any]]:
    """Every pod template's spec the operator renders for ``example``."""
    from tandem.api.v1alpha1 import PoolRole
    from tandem.api.validate import load_inference_cluster
    from tandem_operator import names
    from tandem_operator.render.children import (
        PoolHandle,
        render_cluster_children,
        render_pool_children,
    )

    cr = load_inference_cluster(EXAMPLES / example)
    objects = render_cluster_children(cr, settings, include_pool_replicas=True)
    for role in PoolRole:
        handle = PoolHandle(names.pool_name(cr.metadata.name, role), "uid", 1)
        objects += render_pool_children(cr, role, handle, settings)
    templates = [o["spec"]["template"] for o in objects if o["kind"] == "Deployment"]
    for lws in (o for o in objects if o["kind"] == "LeaderWorkerSet"):
        group = lws["spec"]["leaderWorkerTemplate"]
        templates += [group["workerTemplate"], *filter(None, [group.get("leaderTemplate")])]
    assert templates
    return [t["spec"] for t in templates]


def _rendered_containers(example: str, settings: Any) -> list[dict[str, Any]]:
    """Every container of every pod template the operator renders for ``example``."""
    return [c for spec in _rendered_pod_specs(example, settings) for c in spec["containers"]]


@pytest.fixture
def rendered_pod_specs() -> Callable[[str, Any], list[dict[str, Any]]]:
    """``rendered_pod_specs(example_file, render_settings)``: the operator's pod specs."""
    return _rendered_pod_specs


@pytest.fixture
def rendered_containers() -> Callable[[str, Any], list[dict[str, Any]]]:
    """``rendered_containers(example_file, render_settings)``: the operator's containers."""
    return _rendered_containers


@pytest.fixture
def credentials_dir(tmp_path: Path) -> Callable[[str, str], Path]:
    """``credentials_dir(cluster, name)``: a fresh CA and member certificate for
    ``cluster`` (each call its own CA: two calls are two clusters that do not trust each
    other), written to ``tmp_path/name`` as ``tandem up`` writes them."""
    from datetime import UTC, datetime

    from tandem.security import CredentialBundle, issue, write_bundle

    def make(cluster: str, name: str) -> Path:
        directory = tmp_path / name
        write_bundle(directory, CredentialBundle.of(issue(cluster, datetime.now(UTC))))
        return directory

    return make
