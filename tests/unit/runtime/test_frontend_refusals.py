"""`tandem up` stops waiting at once when the frontend refuses a worker's tokenizer (that
never heals by waiting), and reads nothing else in /readyz as a refusal."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from tandem.runtime.supervisor import frontend_refusals

WORKERS: list[dict[str, object]] = []


class Readyz(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"ready": False, "workers": WORKERS}).encode()
        self.send_response(503)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), Readyz)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_only_tokenizer_mismatches_are_refusals(endpoint: str) -> None:
    WORKERS[:] = [
        {"address": "w1", "last_error": "connection refused"},
        {"address": "w2", "last_error": ""},
    ]
    assert frontend_refusals(endpoint) == []
    WORKERS.append({"address": "w3", "last_error": "tokenizer mismatch: worker has v1, ..."})
    assert frontend_refusals(endpoint) == ["w3: tokenizer mismatch: worker has v1, ..."]


def test_an_unreachable_frontend_is_no_refusal() -> None:
    assert frontend_refusals("http://127.0.0.1:9/v1", timeout_s=0.5) == []
