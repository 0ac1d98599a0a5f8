"""The soak, short: a local cluster (``tandem up``, reference engine, KV over NIXL) offered
twice the capacity it just measured, for 90 s. The excess is refused with 429 +
Retry-After, nothing is lost or hangs, and no process grows after warm-up (RSS under
+10%, descriptors and threads flat). ``make soak`` runs the same for 10 minutes and writes
the figures to docs/benchmarks.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem_dev.faults.load import Outcome
from tandem_dev.faults.soak import render_soak, run_soak

pytestmark = pytest.mark.integration


def test_twice_capacity_for_90_seconds(tmp_path: Path) -> None:
    result = run_soak(tmp_path, seconds=90, warmup_s=30, capacity_s=15)
    print("\n" + render_soak(result))
    assert result.count(Outcome.LOST) == result.count(Outcome.HUNG) == 0
    assert result.count(Outcome.DROPPED) == 0 and result.skipped == 0
    assert result.count(Outcome.ANSWERED) > 0
    # Overload was real and was turned away the documented way, and only that way.
    rejected = result.rejected
    assert rejected and all(r.retry_after for r in rejected)
    assert result.count(Outcome.CLEAN_ERROR) == len(rejected)
    assert result.restarts == 0
    assert {g.name for g in result.growth} >= {"supervisor", "frontend", "prefill-0", "decode-0"}
    for growth in result.growth:
        assert growth.rss_growth < 0.10, growth
        assert growth.flat, growth
