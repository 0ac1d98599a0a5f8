from __future__ import annotations

import pytest

from tandem.engines.reference.config import ReferenceModelConfig
from tandem.engines.reference.kv_layout import compute_kv_bytes
from tandem.kv.ranges import plan_segments
from tandem_dev.bench.kv import GPT_OSS_120B, REFERENCE, plan_ranges


def test_gpt_oss_120b_32k_layout_matches_the_model_card_arithmetic() -> None:
    # 18 full layers keep 32,768 tokens, 18 window layers keep 128; 2 x 8 x 64 x 2 B each.
    per_token_layer = 2 * 8 * 64 * 2
    assert GPT_OSS_120B.kv_bytes(32_768) == (18 * 32_768 + 18 * 128) * per_token_layer


@pytest.mark.parametrize("tokens", [1, 127, 128, 129, 1024, 8192, 32_768])
def test_reference_layout_matches_the_engine(tokens: int) -> None:
    assert REFERENCE.kv_bytes(tokens) == compute_kv_bytes(ReferenceModelConfig(), tokens)


@pytest.mark.parametrize(("total", "size"), [(1_179_648, 65_536), (10, 4), (16, 16)])
def test_bench_ranges_cover_everything_and_never_coalesce(total: int, size: int) -> None:
    ranges = plan_ranges(total, size)
    assert sum(r.length for r in ranges) == total
    assert sorted((r.offset, r.length) for r in ranges)[0][0] == 0
    assert len(plan_segments(ranges, ranges)) == len(ranges)
