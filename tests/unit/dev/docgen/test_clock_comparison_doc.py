"""docs/simulated-engine.md compares the analytic and the measured clock as the code
computes them today (regenerate with ``python -m tandem_dev.docgen.clock_comparison``)."""

from __future__ import annotations

from pathlib import Path

from tandem_dev.docgen.clock_comparison import render_tables

DOC = Path(__file__).parents[4] / "docs" / "simulated-engine.md"


def test_the_doc_tables_are_the_computed_ones() -> None:
    assert render_tables() in DOC.read_text()
