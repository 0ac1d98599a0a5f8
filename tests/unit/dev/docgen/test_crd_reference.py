"""docs/crd-reference.md is generated from the CRDs and kept in sync."""

from __future__ import annotations

from pathlib import Path

from tandem_dev.docgen.crd_reference import render_reference

DOC = Path(__file__).resolve().parents[4] / "docs" / "crd-reference.md"


def test_crd_reference_is_up_to_date() -> None:
    assert DOC.read_text() == render_reference(), (
        "run: python -m tandem_dev.docgen.crd_reference --write docs/crd-reference.md"
    )


def test_reference_covers_both_kinds_and_their_rules() -> None:
    text = render_reference()
    assert "## InferenceCluster" in text and "## WorkerPool" in text
    assert "| `prefill.replicas` | integer | `1` | [0, 1000] |" in text
    assert "minReplicas must not exceed maxReplicas" in text
