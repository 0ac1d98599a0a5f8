"""The generated CRDs: structural, in sync with the committed files, and accepting the examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tandem.api.crd import dump_crd, render_crds
from tandem.api.validate import load_file
from tandem.cli.main import main as cli

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((REPO / "manifests" / "examples").glob("*.yaml"))
FORBIDDEN = {"$ref", "anyOf", "oneOf", "allOf", "not", "$defs", "definitions", "title", "const"}


def _structural_problems(node: dict[str, Any], path: str = "") -> list[str]:
    """Kubernetes' structural-schema rules, as far as our generator can violate them."""
    problems = [f"{path}: {key}" for key in FORBIDDEN & node.keys()]
    escape = node.get("x-kubernetes-int-or-string") or node.get(
        "x-kubernetes-preserve-unknown-fields"
    )
    if "type" not in node and not escape:
        problems.append(f"{path}: no type")
    for name, sub in node.get("properties", {}).items():
        problems += _structural_problems(sub, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        problems += _structural_problems(node["additionalProperties"], f"{path}.*")
    if "items" in node:
        problems += _structural_problems(node["items"], f"{path}[]")
    return problems


@pytest.mark.parametrize("name", sorted(render_crds()))
def test_crd_is_structural(name: str) -> None:
    crd = render_crds()[name]
    for version in crd["spec"]["versions"]:
        assert _structural_problems(version["schema"]["openAPIV3Schema"]) == []


def test_committed_crds_match_the_models() -> None:
    for directory in ("manifests/crds", "charts/tandem/crds"):
        for name, crd in render_crds().items():
            committed = (REPO / directory / name).read_text()
            assert committed == dump_crd(crd), f"{directory}/{name} is stale: run `make crds`"
    assert cli(["crds", "--check", "--root", str(REPO)]) == 0


def test_crd_check_detects_drift(tmp_path: Path) -> None:
    assert cli(["crds", "--write", "--root", str(tmp_path)]) == 0
    assert cli(["crds", "--check", "--root", str(tmp_path)]) == 0
    victim = tmp_path / "charts/tandem/crds/tandem.dev_workerpools.yaml"
    victim.write_text(victim.read_text().replace("shortNames", "shortNamez"))
    assert cli(["crds", "--check", "--root", str(tmp_path)]) == 1


def test_subresources_and_printer_columns() -> None:
    crds = render_crds()
    ic = crds["tandem.dev_inferenceclusters.yaml"]["spec"]
    wp = crds["tandem.dev_workerpools.yaml"]["spec"]
    assert wp["versions"][0]["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    printed = ic["versions"][0]["additionalPrinterColumns"]
    columns = [c["name"] for c in printed if not c.get("priority")]
    assert columns == ["Ready", "Prefill", "Decode", "Plan", "SLO", "Endpoint", "Age"]
    wide = [c["name"] for c in printed if c.get("priority") == 1]  # kubectl get -o wide
    assert wide == ["Workload", "Replans"]
    assert "ic" in ic["names"]["shortNames"]
    assert "wp" in wp["names"]["shortNames"]


def _openapi_validator(crd: dict[str, Any]) -> jsonschema.Draft4Validator:
    # OpenAPI v3.0 schemas are JSON Schema draft 4 in the parts we use (boolean
    # exclusiveMinimum); x-kubernetes-* keywords are ignored by jsonschema.
    return jsonschema.Draft4Validator(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_round_trip_through_the_crd_schema(path: Path) -> None:
    validator = _openapi_validator(render_crds()["tandem.dev_inferenceclusters.yaml"])
    raw = yaml.safe_load(path.read_text())
    errors = sorted(validator.iter_errors(raw), key=str)
    assert errors == []
    (obj,) = load_file(path)
    assert list(validator.iter_errors(obj.to_wire())) == []


def test_crd_schema_rejects_what_the_models_reject() -> None:
    validator = _openapi_validator(render_crds()["tandem.dev_inferenceclusters.yaml"])
    doc = yaml.safe_load((REPO / "manifests/examples/reference-cpu.yaml").read_text())
    doc["spec"]["prefill"]["replicas"] = -1
    assert any(e.path and list(e.path)[-1] == "replicas" for e in validator.iter_errors(doc))
