"""A client that goes away cancels its request: the worker stream is closed and the
router forgets it. Driven through raw ASGI so the disconnect happens at a chosen time."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from .harness import MODEL, Frontend, frontend


async def call_then_disconnect(
    fe: Frontend, body: dict[str, Any], leave_when: Callable[[], bool]
) -> list[dict[str, Any]]:
    raw = json.dumps(body).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"host", b"frontend")],
        "server": ("frontend", 80),
        "client": ("127.0.0.1", 5555),
    }
    sent: list[dict[str, Any]] = []
    body_sent = False

    async def receive() -> dict[str, Any]:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        async with asyncio.timeout(10):
            while not leave_when():  # noqa: ASYNC110 - polling a fake worker
                await asyncio.sleep(0.005)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asyncio.wait_for(fe.app(scope, receive, send), timeout=10)
    return sent


@pytest.mark.parametrize("stream", [False, True])
async def test_disconnect_cancels_the_worker_stream(stream: bool) -> None:
    async with frontend() as fe:
        worker = fe.workers["d1"]
        worker.token_delay = 0.01
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 60,
            "stream": stream,
        }
        await call_then_disconnect(fe, body, lambda: worker.active == 1)
        async with asyncio.timeout(5):
            while fe.router.in_flight:  # noqa: ASYNC110 - polling router state
                await asyncio.sleep(0.005)
    assert worker.cancelled_streams == 1
    assert worker.active == 0


async def test_disconnect_during_remote_prefill_releases_kv() -> None:
    async with frontend() as fe:
        fe.workers["d1"].pull_delay = 10.0
        body = {"model": MODEL, "messages": [{"role": "user", "content": "x" * 400}]}
        await call_then_disconnect(fe, body, lambda: fe.workers["d1"].decode_calls == 1)
        async with asyncio.timeout(5):
            while fe.ledger.parked:  # noqa: ASYNC110 - polling the fake KV ledger
                await asyncio.sleep(0.005)
        assert fe.router.in_flight == 0
    assert len(fe.ledger.released) == 1
