"""docs/simulated-engine.md shows the clock's calibration as the code computes it, and
every published anchor lies within its stated range."""

from __future__ import annotations

from pathlib import Path

from tandem_dev.docgen.calibration import ANCHORS, render_table

DOC = Path(__file__).parents[4] / "docs" / "simulated-engine.md"


def test_the_doc_table_is_the_computed_one() -> None:
    assert render_table() in DOC.read_text()


def test_every_anchor_is_within_its_published_range() -> None:
    for anchor in ANCHORS:
        assert anchor.low <= anchor.compute() <= anchor.high, anchor.what
