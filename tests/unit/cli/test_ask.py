"""`tandem ask`: safe terminal output, a clear error without a running cluster, and the
API key a cluster's frontend requires."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
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


def _fake_frontend(monkeypatch: pytest.MonkeyPatch, key: str) -> list[str | None]:
    """A frontend that requires ``key`` (401 otherwise); returns the Authorization
    headers it saw."""
    seen: list[str | None] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        if request.headers.get("authorization") != f"Bearer {key}":
            error = {"code": "invalid_api_key", "message": "a valid API key is required"}
            return httpx.Response(401, json={"error": error})
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        chunk = {"choices": [{"delta": {"content": "Paris"}, "finish_reason": "stop"}]}
        body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"
        return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})

    real = httpx.Client
    monkeypatch.setattr(
        "tandem.cli.ask.httpx.Client",
        lambda **kw: real(transport=httpx.MockTransport(handle), **kw),
    )
    return seen


def test_the_key_comes_from_the_flag_or_openai_api_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen = _fake_frontend(monkeypatch, "sk-right")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    endpoint = ["--endpoint", "http://frontend.test/v1"]
    assert cli(["ask", "capital?", *endpoint]) == 1
    assert capsys.readouterr().err == "error: HTTP 401: a valid API key is required\n"
    assert seen == [None]
    assert cli(["ask", "capital?", *endpoint, "--api-key", "sk-right"]) == 0
    assert capsys.readouterr().out.startswith("Paris\n")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-right")
    assert cli(["ask", "capital?", *endpoint]) == 0
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    assert cli(["ask", "capital?", *endpoint, "--api-key", "sk-right"]) == 0  # the flag wins
    assert seen[1:] == ["Bearer sk-right"] * 6
