"""The soak's verdicts (pure): growth after warm-up, flat descriptors and threads."""

from __future__ import annotations

import os
import time

import pytest

from tandem_dev.faults.soak import Sample, judge_growth, percentile, read_sample


def samples(rss: list[int], fds: list[int] | None = None) -> list[Sample]:
    fds = fds or [10] * len(rss)
    return [Sample(float(t), r, f, 8) for t, (r, f) in enumerate(zip(rss, fds, strict=True))]


def test_growth_compares_the_first_and_last_tenth_after_warm_up() -> None:
    # Warm-up (t < 5) grows a lot; under load afterwards 100 -> 105; one sample after.
    series = samples([10, 40, 70, 90, 99] + [100] * 10 + [105] * 10 + [105])
    growth = judge_growth("frontend", series, warmup_end=5, load_end=25)
    assert (growth.rss_start, growth.rss_mid, growth.rss_end) == (100, 102.5, 105)
    assert growth.rss_growth == pytest.approx(0.05)
    assert growth.flat


def test_descriptors_must_come_back_once_the_load_stops() -> None:
    # Client connections come and go under load: flat if they are closed afterwards.
    busy = samples([100] * 21, fds=[10] + [30, 41] * 10)
    assert not judge_growth("frontend", busy, warmup_end=0, load_end=20).flat
    closed = samples([100] * 22, fds=[10] + [30, 41] * 10 + [11])
    growth = judge_growth("frontend", closed, warmup_end=0, load_end=21)
    assert growth.flat and growth.fds == (10, 41, 11)


def test_too_short_a_run_is_refused() -> None:
    with pytest.raises(ValueError, match="too few samples"):
        judge_growth("x", samples([1, 2, 3]), warmup_end=1, load_end=2)
    with pytest.raises(ValueError, match="none after the load"):
        judge_growth("x", samples([1] * 10), warmup_end=1, load_end=20)


def test_percentile_nearest_rank() -> None:
    values = sorted(float(v) for v in range(1, 101))
    assert percentile(values, 0.5) == 51.0
    assert percentile(values, 0.99) == 100.0


def test_read_sample_reads_this_process() -> None:
    sample = read_sample(os.getpid(), time.monotonic())
    assert sample is not None and sample.rss_bytes > 0 and sample.fds > 0 and sample.threads >= 1
    assert read_sample(2**22 + 12345, 0.0) is None  # no such process


def test_verdicts_name_what_missed_its_target() -> None:
    from tandem_dev.faults.load import Outcome, RequestRecord
    from tandem_dev.faults.soak import Growth, SoakResult, verdicts

    refused = RequestRecord(0, False, 0.0, 0.1, Outcome.CLEAN_ERROR, status=429, retry_after="1")
    grew = Growth("decode-0", 100.0, 106.0, 113.0, (25, 25, 25), (13, 13, 13))
    result = SoakResult(60, 10, 2.0, 4.0, (refused,), 0, (grew,), 0)
    assert verdicts(result) == [
        "nothing lost or hung: yes",
        "excess refused with 429 + Retry-After: yes",
        "RSS growth under 10% after warm-up in every process: NO (decode-0 +13.0%)",
        "descriptors and threads back to their level after the load: yes",
    ]
