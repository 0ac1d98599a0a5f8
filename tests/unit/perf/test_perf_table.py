"""A user's measured table: interpolation worked out by hand, and refusals that name
the field at fault."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tandem.api.v1alpha1 import AcceleratorProfile
from tandem.capacity import GPT_OSS_120B
from tandem.perf.clock import ClockChoice, TableClock, build_clock
from tandem.perf.hardware import performance_for
from tandem.perf.model import Chunk, PerfModel
from tandem.perf.table import FORMAT, PerfTableError, load_perf_table, parse_perf_table


def document(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "format": FORMAT,
        "prefill": [[1000, 1.0], [2000, 3.0]],
        "decode": {"batch": [1, 3], "context": [100, 300], "seconds": [[1, 2], [3, 6]]},
    }
    doc.update(changes)
    return doc


def test_prefill_interpolates_through_zero_and_extends_the_last_segment() -> None:
    table = parse_perf_table(document())
    assert table.prefill_to(500) == pytest.approx(0.5)
    assert table.prefill_to(1500) == pytest.approx(2.0)
    assert table.prefill_to(3000) == pytest.approx(5.0)
    # A chunk costs the difference: 1000 tokens after 1000 cached = 3 - 1 = 2 s, more
    # than the first 1000 (1 s): the measurement's attention growth carries over.
    assert table.step_seconds([], [Chunk(1000, 1000)]) == pytest.approx(2.0)


def test_decode_is_bilinear_in_batch_and_mean_context() -> None:
    table = parse_perf_table(document())
    # Batch 1 at context 200: halfway between 1 and 2.
    assert table.decode_step([200]) == pytest.approx(1.5)
    # Batch 3 with contexts 100, 200, 300 (mean 200): halfway between 3 and 6.
    assert table.decode_step([100, 200, 300]) == pytest.approx(4.5)
    # Batch 4 lies past the grid: the batch segment (1.5 -> 4.5 over 2) extends to 6.0.
    assert table.decode_step([200] * 4) == pytest.approx(6.0)
    # A mixed step adds the decode time and the chunks' time.
    assert table.step_seconds([200], [Chunk(0, 500)]) == pytest.approx(2.0)


def test_noisy_measurements_never_extrapolate_a_step_that_gets_cheaper_with_load() -> None:
    # Batch 4 happened to step faster than batch 2 (a loaded machine): past the grid the
    # falling segment would reach 0 s at batch 6 and go on down. The last measurement
    # holds instead, and below the grid the first one does.
    noisy = {"batch": [2, 4], "context": [100, 300], "seconds": [[0.3, 0.3], [0.2, 0.2]]}
    table = parse_perf_table(document(decode=noisy))
    assert table.decode_step([200] * 3) == pytest.approx(0.25)  # inside: as measured
    assert table.decode_step([200] * 6) == pytest.approx(0.2)
    assert table.decode_step([200] * 64) == pytest.approx(0.2)
    assert table.decode_step([200]) == pytest.approx(0.3)  # below the grid: flat
    assert table.decode_step([10] * 2) == pytest.approx(0.3)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"format": "v0"}, "format must be"),
        ({"prefill": []}, "prefill must be a non-empty list"),
        ({"prefill": [[2000, 1.0], [1000, 2.0]]}, "prefill tokens must be strictly increasing"),
        ({"prefill": [[1000, -1.0]]}, "prefill seconds must hold positive numbers"),
        ({"decode": {"batch": [1], "context": [1], "seconds": [[1, 2]]}}, r"decode.seconds\[0\]"),
        ({"decode": {"batch": [1, 2], "context": [1], "seconds": [[1]]}}, "one row per batch"),
        ({"kv_transfer_bytes_per_second": 0}, "kv_transfer_bytes_per_second"),
    ],
)
def test_bad_tables_name_the_field(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(PerfTableError, match=message):
        parse_perf_table(document(**changes))


def test_files_load_and_the_clock_uses_their_link(tmp_path: Path) -> None:
    perf = PerfModel(GPT_OSS_120B, performance_for(AcceleratorProfile.B200))
    path = tmp_path / "table.json"
    path.write_text(
        json.dumps(document(kv_transfer_bytes_per_second=1.212678144e9, source="bench, 2026"))
    )
    clock = build_clock(perf, AcceleratorProfile.B200, table=load_perf_table(path))
    assert isinstance(clock, TableClock)
    assert clock.source == "table: bench, 2026"
    # 32k gpt-oss-120b tokens in bf16 are 1,212,678,144 bytes: one second at that rate.
    assert clock.kv_transfer_seconds(32768) == pytest.approx(1.0)
    analytic = build_clock(perf, AcceleratorProfile.B200, choice=ClockChoice.ANALYTIC)
    assert analytic.kv_transfer_seconds(32768) == perf.kv_transfer_seconds(32768)
    with pytest.raises(PerfTableError, match="cannot read performance table"):
        load_perf_table(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(PerfTableError, match="is not JSON"):
        load_perf_table(tmp_path / "bad.json")
