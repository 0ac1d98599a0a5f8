"""The frontend-vs-Dynamo table says when its "2 cores" row shares cores with the client."""

from __future__ import annotations

import pytest

from tandem_dev.bench.tokenizer_frontends import format_markdown

ROW = {
    "frontend": "Tandem, 2 cores",
    "prompt_tokens": 32767,
    "requests_per_s": 12.3,
    "rounds_requests_per_s": [12.0, 12.3],
    "requests_per_cpu_s": 18.6,
    "client_p50_ms": 58.7,
    "client_p99_ms": 153.4,
    "errors": 0,
}


@pytest.mark.parametrize(("cores", "noted"), [(2, True), (1, True), (3, False), (16, False)])
def test_the_pinning_note_appears_only_without_a_core_for_the_client(
    cores: int, noted: bool
) -> None:
    table = format_markdown([ROW], cores=cores)
    assert ("sharing them with its load" in table) is noted
    assert table.startswith("| frontend |")
