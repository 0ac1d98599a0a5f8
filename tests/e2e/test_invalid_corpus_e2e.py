"""The invalid-InferenceCluster corpus (tests/data/invalid-inferenceclusters) against the
real API server with Tandem's CRDs: every case is rejected, and the error names the same
field path ``tandem validate`` names (tests/unit/api/test_invalid_corpus.py). Creates go
through ``kubectl create``; immutable-field cases create the base, then ``kubectl
replace`` it with the change."""

from __future__ import annotations

import importlib.util
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tandem.devcluster import DevCluster

pytestmark = [pytest.mark.k8s, pytest.mark.parallel]

REPO = Path(__file__).resolve().parents[2]
CORPUS_DIR = REPO / "tests" / "data" / "invalid-inferenceclusters"


def _load_corpus() -> Any:
    spec = importlib.util.spec_from_file_location("tandem_tests_corpus", CORPUS_DIR / "corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


corpus = _load_corpus()
CASES = corpus.load_cases()


@pytest.fixture(scope="module")
def namespace(k8s_cluster: DevCluster) -> Iterator[str]:
    # Helm may have installed them earlier in the session: applying the same files beside
    # it must not conflict (test_chart_install.py), so no --force-conflicts here.
    k8s_cluster.kubectl("apply", "--server-side", "-f", str(REPO / "manifests" / "crds"))
    for crd in ("inferenceclusters.tandem.dev", "workerpools.tandem.dev"):
        k8s_cluster.wait_crd_established(crd)
    name = f"corpus-{uuid.uuid4().hex[:6]}"
    k8s_cluster.kubectl("create", "namespace", name)
    yield name
    k8s_cluster.kubectl("delete", "namespace", name, "--wait=false")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_the_api_server_rejects_the_case_naming_its_field(
    k8s_cluster: DevCluster, namespace: str, case: Any
) -> None:
    doc, previous = corpus.documents(case)
    if previous is not None:
        name = f"update-{uuid.uuid4().hex[:6]}"
        for d in (doc, previous):
            d["metadata"].update(name=name, namespace=namespace)
        k8s_cluster.kubectl("create", "-f", "-", input=json.dumps(previous))
        result = k8s_cluster.kubectl("replace", "-f", "-", input=json.dumps(doc), check=False)
        k8s_cluster.kubectl("delete", "ic", name, "-n", namespace, "--wait=false")
    else:
        doc["metadata"]["namespace"] = namespace
        result = k8s_cluster.kubectl("create", "-f", "-", input=json.dumps(doc), check=False)
    assert result.returncode != 0, f"accepted: {result.stdout}"
    assert case.field in result.stderr, result.stderr
    if case.message:
        assert case.message in result.stderr, result.stderr
