"""What ``tandem profile`` measures (the grid, bounded by the context, the KV pool and the
asked limits) and the table it writes (each point's median, a table the loader accepts)."""

from __future__ import annotations

import pytest

from tandem.capacity.models import TANDEM_REFERENCE
from tandem.perf.profile import (
    Fits,
    Measurements,
    ProfileError,
    ProfileGrid,
    compute_profile_grid,
    render_profile_table,
)
from tandem.perf.table import MeasuredWorker, parse_perf_table


def pool_of(tokens: int) -> Fits:
    """A pool that holds ``tokens`` tokens in all, each sequence one more than its own."""
    return lambda batch, length: batch * (length + 1) <= tokens


@pytest.mark.parametrize(
    ("max_context", "pool", "longest", "max_batch", "prompts", "batches"),
    [
        # 128, x4 up to 2048; two 2049-token sequences fit 5000 tokens, four do not.
        (8192, 5000, 2048, 16, (128, 512, 2048), (1, 2)),
        # The longest asked is a point of its own, not rounded to the ladder.
        (8192, 100_000, 1000, 16, (128, 512, 1000), (1, 2, 4, 8, 16)),
        # The context leaves room for the decode token: 299, not 300.
        (300, 100_000, 2048, 4, (128, 299), (1, 2, 4)),
        # 2049 tokens overflow a 1500-token pool: halved to 1024, which fits once.
        (8192, 1500, 2048, 16, (128, 512, 1024), (1,)),
        # Shorter than the first rung: that prompt alone.
        (8192, 100_000, 64, 2, (64,), (1, 2)),
    ],
)
def test_the_grid_fits_the_context_the_pool_and_the_limits(
    max_context: int,
    pool: int,
    longest: int,
    max_batch: int,
    prompts: tuple[int, ...],
    batches: tuple[int, ...],
) -> None:
    grid = compute_profile_grid(
        max_context, pool_of(pool), longest_prompt=longest, max_batch=max_batch, repeats=5
    )
    assert grid == ProfileGrid(prompts, batches, 5)


def test_a_pool_that_holds_no_prompt_is_refused() -> None:
    with pytest.raises(ProfileError, match="KV pool holds no prompt"):
        compute_profile_grid(8192, lambda batch, tokens: False)


def test_the_table_holds_each_points_median_and_loads() -> None:
    grid = ProfileGrid((128, 512), (1, 2), 3)
    # One slow repeat per point (another process got the CPU) leaves the median alone.
    measured = Measurements(
        prefill={128: [0.2, 9.0, 0.25], 512: [1.0, 1.1, 30.0]},
        decode={
            (1, 128): [0.01, 0.011, 5.0], (1, 512): [0.02, 5.0, 0.021],
            (2, 128): [5.0, 0.012, 0.013], (2, 512): [0.03, 0.031, 0.032],
        },
    )  # fmt: skip
    worker = MeasuredWorker(TANDEM_REFERENCE, 1 << 20, 16, 64)
    document = render_profile_table(
        grid, measured, model="tandem-reference", engine="reference", accelerator="cpu",
        source="a test", worker=worker,
    )  # fmt: skip
    assert document["prefill"] == [[128, 0.25], [512, 1.1]]
    assert document["decode"] == {
        "batch": [1, 2],
        "context": [128, 512],
        "seconds": [[0.011, 0.021], [0.013, 0.031]],
    }
    table = parse_perf_table(document)
    assert (table.model, table.source, table.worker) == ("tandem-reference", "a test", worker)
    assert table.decode_step([128, 128]) == pytest.approx(0.013)


def test_medians_keep_four_significant_digits() -> None:
    grid = ProfileGrid((128,), (1,), 1)
    measured = Measurements({128: [0.123456789]}, {(1, 128): [0.000123456]})
    worker = MeasuredWorker(TANDEM_REFERENCE, 1 << 20, 16, 64)
    document = render_profile_table(
        grid, measured, model="m", engine="reference", accelerator="cpu", source="", worker=worker
    )
    assert document["prefill"] == [[128, 0.1235]]
    assert document["decode"]["seconds"] == [[0.0001235]]
