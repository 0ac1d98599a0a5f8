from __future__ import annotations

import pytest

from tandem.engines.base import KvRange
from tandem.kv.errors import KvRangeError
from tandem.kv.ranges import Segment, check_ranges, plan_segments


def _r(region: int, offset: int, length: int) -> KvRange:
    return KvRange(region, offset, length)


def test_check_ranges_sums_lengths_inside_regions() -> None:
    ranges = [_r(0, 0, 10), _r(1, 90, 10), _r(0, 95, 5)]
    assert check_ranges(ranges, [100, 100], "local") == 25


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        (_r(2, 0, 1), "names region 2"),
        (_r(-1, 0, 1), "names region -1"),
        (_r(0, 95, 6), "outside region 0"),
        (_r(1, 101, 0), "outside region 1"),
        (_r(0, -1, 1), "outside region 0"),
        (_r(0, 0, -1), "outside region 0"),
    ],
)
def test_check_ranges_rejects_out_of_bounds(bad: KvRange, fragment: str) -> None:
    with pytest.raises(KvRangeError, match=fragment):
        check_ranges([_r(0, 0, 1), bad], [100, 100], "peer w@1")


@pytest.mark.parametrize(
    ("remote", "local", "expected"),
    [
        # both sides adjacent: one descriptor
        (
            [_r(0, 0, 4), _r(0, 4, 4)],
            [_r(1, 8, 4), _r(1, 12, 4)],
            [Segment(_r(0, 0, 8), _r(1, 8, 8))],
        ),
        # remote adjacent, local not: two descriptors
        (
            [_r(0, 0, 4), _r(0, 4, 4)],
            [_r(1, 8, 4), _r(1, 20, 4)],
            [Segment(_r(0, 0, 4), _r(1, 8, 4)), Segment(_r(0, 4, 4), _r(1, 20, 4))],
        ),
        # adjacent offsets but different regions: no merge
        (
            [_r(0, 0, 4), _r(1, 4, 4)],
            [_r(0, 0, 4), _r(0, 4, 4)],
            [Segment(_r(0, 0, 4), _r(0, 0, 4)), Segment(_r(1, 4, 4), _r(0, 4, 4))],
        ),
        # empty ranges vanish and do not block merging
        (
            [_r(0, 0, 4), _r(0, 50, 0), _r(0, 4, 4)],
            [_r(0, 0, 4), _r(0, 70, 0), _r(0, 4, 4)],
            [Segment(_r(0, 0, 8), _r(0, 0, 8))],
        ),
        ([], [], []),
    ],
)
def test_plan_segments_coalesces_adjacent_pairs(
    remote: list[KvRange], local: list[KvRange], expected: list[Segment]
) -> None:
    segments = plan_segments(remote, local)
    assert segments == expected
    assert sum(s.length for s in segments) == sum(r.length for r in remote)


def test_plan_segments_rejects_count_mismatch() -> None:
    with pytest.raises(KvRangeError, match="layouts disagree"):
        plan_segments([_r(0, 0, 4)], [])


def test_plan_segments_rejects_length_mismatch() -> None:
    with pytest.raises(KvRangeError, match="remote length 4 != local length 5"):
        plan_segments([_r(0, 0, 4)], [_r(0, 0, 5)])
