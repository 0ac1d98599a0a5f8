"""The benchmark report writer: a partial run replaces only its own sections."""

from __future__ import annotations

from tandem_dev.bench.__main__ import SECTIONS, merge_sections


def test_a_partial_run_replaces_its_sections_and_keeps_the_others() -> None:
    kv, frontend, autoscale = SECTIONS[0].title, SECTIONS[1].title, SECTIONS[3].title
    old = (
        "# Benchmarks\n\nold header\n"
        f"\n## {kv}\n\nabout kv\n\n| kv table |\n"
        f"\n## {autoscale}\n\nabout autoscale\n\n| old autoscale |\n"
    )
    merged = merge_sections(old, {frontend: "about frontend\n\n| new |\n"}, "# Benchmarks\n\nnew\n")
    assert merged.startswith("# Benchmarks\n\nnew\n")
    assert merged.index(kv) < merged.index(frontend) < merged.index(autoscale)  # SECTIONS order
    assert "| kv table |" in merged and "| old autoscale |" in merged and "| new |" in merged
    again = merge_sections(merged, {frontend: "about frontend\n\n| newer |\n"}, "# B\n")
    assert "| newer |" in again and "| new |\n" not in again and again.count(frontend) == 1
