"""`tandem ask`: safe terminal output and a clear error without a running cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.cli.ask import _printable
from tandem.cli.main import main as cli


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain text", "plain text"),
        ("keeps\ttabs\nand newlines", "keeps\ttabs\nand newlines"),
        ("\x1b[2J\x1b[31mred", "\\x1b[2J\\x1b[31mred"),  # no terminal control
        ("bell\x07 del\x7f nul\x00", "bell\\x07 del\\x7f nul\\x00"),
        ("é ü 字 \ufffd", "é ü 字 \ufffd"),
    ],
)
def test_control_characters_are_escaped(raw: str, shown: str) -> None:
    assert _printable(raw) == shown


def test_no_running_cluster_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TANDEM_HOME", str(tmp_path))
    assert cli(["ask", "hello"]) == 1
    assert capsys.readouterr().err == (
        "error: no local cluster is running: start one with `tandem up -f FILE --detach`\n"
    )
    assert cli(["ask", "hello", "--name", "ghost"]) == 1
    assert capsys.readouterr().err == (
        "error: cluster 'ghost' is not running (start one with `tandem up -f FILE --detach`)\n"
    )
