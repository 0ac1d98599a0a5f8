"""docs/simulated-engine.md and the goodput section of docs/benchmarks.md show the clocks'
calibration as the code computes it; every anchor cites its source by URL and gives a
bound; the analytic clock lies within each; the docs quote the measured prefill."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.api.v1alpha1 import AcceleratorProfile
from tandem_dev.docgen.calibration import ANCHORS, analytic_clock, prefill_seconds, render_table

DOCS = Path(__file__).parents[4] / "docs"


@pytest.mark.parametrize("doc", ["simulated-engine.md", "benchmarks.md"])
def test_the_doc_tables_are_the_computed_ones(doc: str) -> None:
    assert render_table() in (DOCS / doc).read_text()


def test_every_anchor_cites_a_url_and_gives_a_bound() -> None:
    for anchor in ANCHORS:
        assert "https://" in anchor.source or anchor.source == "derived from the same guide"
        assert anchor.low is not None or anchor.high is not None, anchor.what


def test_theanalytic_clock_clock_is_within_every_bound() -> None:
    # The roofline's efficiencies were set against these rows; the measured clock is
    # shown against them, not held to them.
    for anchor in ANCHORS:
        assert anchor.within(anchor.figure(analytic_clock)), anchor.what


@pytest.mark.parametrize("doc", ["architecture.md", "gpu-deployment.md"])
def test_the_docs_quote_the_measured_prefill(doc: str) -> None:
    text = (DOCS / doc).read_text()
    for profile in (AcceleratorProfile.GB200, AcceleratorProfile.B200):
        assert f"{prefill_seconds(profile):.2f} s on a {profile.value.upper()}" in text
