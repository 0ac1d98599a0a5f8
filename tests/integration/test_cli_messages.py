"""The CLI's long-running and networked paths, as real processes on 127.0.0.1: what
``tandem ask`` sends and prints of a model's bytes, and what an operator that cannot
reach its API server says while it waits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from tandem.devcluster.ports import allocate_ports

pytestmark = pytest.mark.integration

TANDEM = Path(sys.executable).parent / "tandem"
# What a model may emit: terminal escapes (clear screen, red), a carriage return that
# would overwrite the line, a bell. Whoever runs the endpoint, its model can emit them.
HOSTILE = "\x1b[2J\x1b[31mred\rover\x07 ok\n"


class OpenAIStream(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint (``tandem ask --endpoint`` takes any) whose model says
    HOSTILE. Shapes as in OpenAI's API reference: ``GET /v1/models`` lists
    ``{"data": [{"id": ...}]}``; a streamed chat completion is ``data: {chunk}`` SSE events
    (``chat.completion.chunk`` with ``choices[].delta.content``, then ``finish_reason``, a
    last chunk with ``usage`` for ``stream_options.include_usage``), ended by
    ``data: [DONE]``. The request bodies it got are kept in ``received``."""

    received: list[dict[str, object]] = []

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def do_POST(self) -> None:
        self.received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        base = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m"}
        chunks = [
            {**base, "choices": [{"index": 0, "delta": {"content": part}, "finish_reason": None}]}
            for part in (HOSTILE[:6], HOSTILE[6:])
        ]
        chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        usage = {"prompt_tokens": 2, "completion_tokens": 5, "total_tokens": 7}
        chunks.append({**base, "choices": [], "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), OpenAIStream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_ask_never_passes_control_bytes_to_the_terminal(endpoint: str) -> None:
    result = subprocess.run(
        [str(TANDEM), "ask", "hi", "--endpoint", endpoint],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode()
    assert out == (
        "\\x1b[2J\\x1b[31mred\\x0dover\\x07 ok\n\n"
        "[model m: 2 prompt tokens, 5 completion tokens, finish_reason=stop]\n"
    )
    assert not {chr(c) for c in range(32)} - {"\n"} & set(out)
    # Greedy unless told otherwise: a small model's answer is then its best, every time.
    assert [body["temperature"] for body in OpenAIStream.received[-1:]] == [0.0]


def test_ask_passes_the_temperature_it_is_given(endpoint: str) -> None:
    argv = [str(TANDEM), "ask", "hi", "--endpoint", endpoint, "--temperature", "0.7"]
    result = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert OpenAIStream.received[-1]["temperature"] == 0.7


def test_an_operator_that_cannot_reach_its_api_server_says_so_once(tmp_path: Path) -> None:
    api_port, metrics_port = allocate_ports(2)  # nothing listens on api_port
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{api_port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    log = tmp_path / "operator.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(TANDEM), "operator", "run", f"--kubeconfig={kubeconfig}",
             f"--metrics-port={metrics_port}"],
            stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while "cannot reach the API server" not in log.read_text():
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
            time.sleep(7)  # three more rounds of leader election (every 2 s)
        finally:
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=30)
    text = log.read_text()
    assert code == 0, text
    warnings = [line for line in text.splitlines() if " WARNING " in line]
    assert len(warnings) == 1, text
    assert warnings[0].endswith(
        f"leader election: cannot reach the API server (Cannot connect to host "
        f"127.0.0.1:{api_port} ssl:default [Connect call failed ('127.0.0.1', {api_port})]); "
        "retrying"
    )
    assert "Traceback" not in text and "Unclosed" not in text
