"""The invalid-InferenceCluster corpus (tests/data/invalid-inferenceclusters) through
``tandem validate``'s checks: every case is rejected, naming the case's field path. The
corpus covers every bound of the generated CRD and every cross-field rule; the e2e tier
(tests/e2e/test_invalid_corpus_e2e.py) sends the same cases to the real API server."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from tandem.api import v1alpha1
from tandem.api.crd import render_crds
from tandem.api.validate import ManifestError, _walk_models, parse_object

CORPUS_DIR = Path(__file__).parents[2] / "data" / "invalid-inferenceclusters"


def _load_corpus() -> Any:
    spec = importlib.util.spec_from_file_location("tandem_tests_corpus", CORPUS_DIR / "corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


corpus = _load_corpus()
CASES = corpus.load_cases()


def test_the_corpus_is_large_and_its_base_is_valid() -> None:
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)
    parse_object(corpus.base_document())


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_tandem_validate_rejects_the_case_naming_its_field(case: Any) -> None:
    doc, previous = corpus.documents(case)
    before = parse_object(previous) if previous is not None else None
    with pytest.raises(ManifestError) as info:
        parse_object(doc, "case.yaml", before)
    paths = [e.path for e in info.value.errors]
    assert any(p == case.field or p.startswith(case.field + ".") or p.startswith(case.field + "[")
               for p in paths), paths  # fmt: skip
    if case.message:
        assert any(case.message in e.message for e in info.value.errors), info.value.errors


def _schema_bounds() -> set[tuple[str, str]]:
    crd = next(c for n, c in render_crds().items() if "inferenceclusters" in n)
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    found: set[tuple[str, str]] = set()

    def walk(node: dict[str, Any], path: str) -> None:
        for keyword in ("minimum", "maximum", "minLength", "maxLength", "pattern", "enum"):
            if keyword in node:
                found.add((path, keyword))
        for name, child in (node.get("properties") or {}).items():
            walk(child, f"{path}.{name}")
        if node.get("type") == "array":
            walk(node["items"], f"{path}[0]")

    walk(root, "spec")
    return found


def test_every_bound_of_the_schema_has_a_case() -> None:
    covered = {(c.field, c.bound) for c in CASES if c.bound}
    missing = _schema_bounds() - covered
    assert not missing, f"add cases to tests/data/invalid-inferenceclusters/bounds.yaml: {missing}"


def test_every_cross_field_rule_has_a_case() -> None:
    cluster = parse_object(corpus.base_document())
    rules = {r.message for model, _ in _walk_models(cluster, "") for r in model.cel_rules}
    assert rules  # the walk reached the models
    covered = {c.message for c in CASES if c.message}
    missing = {m for m in rules if not any(part in m for part in covered)}
    assert not missing, f"add cases to cel.yaml / immutable.yaml for: {missing}"
    # WorkerPool's rules are the operator's to honour; the corpus is about what users write.
    assert v1alpha1.WorkerPoolSpec.cel_rules
