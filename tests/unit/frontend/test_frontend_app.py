"""The HTTP surface end to end in-process: real app, serving and router, fake workers."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from tandem.frontend.app import create_frontend_admin_app
from tandem.frontend.server import build_frontend
from tandem.router.policy import WorkerRole
from tandem.security import CredentialBundle, CredentialStore, issue, write_bundle
from tandem.security.credentials import CERTIFICATE_EXPIRY
from tandem.tokenization import ByteTokenizer, ChatMessage
from tandem_dev.doubles.inprocess import InProcessCluster, fake_token

from .harness import MODEL, frontend, make_config

TOKENIZER = ByteTokenizer()
P, D = WorkerRole.PREFILL, WorkerRole.DECODE


def chat_body(content: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "seed": 3, **extra}


def expected_chat_text(content: str, max_tokens: int) -> str:
    prompt = TOKENIZER.apply_chat_template([ChatMessage("user", content)])
    return TOKENIZER.decode([fake_token(prompt, i, 3) for i in range(max_tokens)])


def sse_events(text: str) -> list[Any]:
    events = []
    for block in text.split("\n\n"):
        if block.startswith("data: "):
            data = block.removeprefix("data: ")
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


async def test_chat_completion() -> None:
    async with frontend() as fe:
        response = await fe.client.post("/v1/chat/completions", json=chat_body(max_tokens=5))
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion" and body["model"] == MODEL
    assert body["choices"][0]["message"] == {
        "role": "assistant",
        "content": expected_chat_text("hi", 5),
    }
    assert body["choices"][0]["finish_reason"] == "length"
    prompt_tokens = len(TOKENIZER.apply_chat_template([ChatMessage("user", "hi")]))
    assert body["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 5,
        "total_tokens": prompt_tokens + 5,
    }
    assert response.headers["x-request-id"] == "req1"
    assert body["id"] == "chatcmpl-req1"


async def test_token_ids_on_request() -> None:
    prompt = TOKENIZER.apply_chat_template([ChatMessage("user", "hi")])
    async with frontend() as fe:
        plain = await fe.client.post("/v1/chat/completions", json=chat_body(max_tokens=3))
        with_ids = await fe.client.post(
            "/v1/chat/completions", json=chat_body(max_tokens=3, return_token_ids=True)
        )
    assert "token_ids" not in plain.json()["choices"][0]
    assert with_ids.json()["choices"][0]["token_ids"] == [
        fake_token(prompt, i, 3) for i in range(3)
    ]


async def test_client_request_id_is_echoed() -> None:
    async with frontend() as fe:
        ok = await fe.client.post(
            "/v1/chat/completions", json=chat_body(), headers={"x-request-id": "abc-123"}
        )
        odd = await fe.client.post(
            "/v1/chat/completions", json=chat_body(), headers={"x-request-id": "bad id!"}
        )
    assert ok.headers["x-request-id"] == "abc-123"
    assert odd.headers["x-request-id"] == "req1"


@pytest.mark.parametrize("include_usage", [False, True])
async def test_chat_stream_matches_non_stream(include_usage: bool) -> None:
    body = chat_body("x" * 300, max_tokens=6)  # long enough for remote prefill
    async with frontend() as fe:
        full = (await fe.client.post("/v1/chat/completions", json=body)).json()
        streamed = await fe.client.post(
            "/v1/chat/completions",
            json={**body, "stream": True, "stream_options": {"include_usage": include_usage}},
        )
    assert streamed.headers["content-type"].startswith("text/event-stream")
    events = sse_events(streamed.text)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == full["choices"][0]["message"]["content"]
    finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert [c["choices"][0]["finish_reason"] for c in finals] == ["length"]
    if include_usage:
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == full["usage"]
        assert all(c["usage"] is None for c in chunks[:-1])
    else:
        assert all("usage" not in c for c in chunks)


async def test_completions_text_and_token_prompts() -> None:
    prompt_ids = TOKENIZER.encode("hello", add_bos=True)
    expected = TOKENIZER.decode([fake_token(prompt_ids, i, 3) for i in range(4)])
    async with frontend() as fe:
        by_text = await fe.client.post(
            "/v1/completions", json={"model": MODEL, "prompt": "hello", "max_tokens": 4, "seed": 3}
        )
        by_ids = await fe.client.post(
            "/v1/completions",
            json={"model": "org/tiny", "prompt": prompt_ids, "max_tokens": 4, "seed": 3},
        )
        streamed = await fe.client.post(
            "/v1/completions",
            json={"model": MODEL, "prompt": ["hello"], "max_tokens": 4, "seed": 3, "stream": True},
        )
    assert by_text.json()["choices"][0]["text"] == expected
    assert by_ids.json()["choices"][0]["text"] == expected
    assert by_ids.json()["model"] == "org/tiny"  # the accepted alias is echoed
    events = sse_events(streamed.text)
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == expected
    assert events[-2]["choices"][0]["finish_reason"] == "length"


async def test_stop_string_truncates_and_cancels_the_worker() -> None:
    full = expected_chat_text("hi", 30)
    stop = full[10:12]
    cut = full.index(stop)
    async with frontend() as fe:
        fe.workers["d1"].token_delay = 0.001
        plain = await fe.client.post(
            "/v1/chat/completions", json=chat_body(max_tokens=30, stop=[stop])
        )
        streamed = await fe.client.post(
            "/v1/chat/completions", json=chat_body(max_tokens=30, stop=stop, stream=True)
        )
        cancelled = fe.workers["d1"].cancelled_streams
    choice = plain.json()["choices"][0]
    assert choice["message"]["content"] == full[:cut]
    assert choice["finish_reason"] == "stop"
    events = sse_events(streamed.text)
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1])
    assert text == full[:cut]
    assert events[-2]["choices"][0]["finish_reason"] == "stop"
    assert cancelled == 2


async def test_eos_finishes_with_stop() -> None:
    async with frontend() as fe:
        fe.workers["d1"].eos_token = TOKENIZER.eos_token_id
        fe.workers["d1"].eos_at = 3
        response = await fe.client.post("/v1/chat/completions", json=chat_body(max_tokens=20))
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["content"] == expected_chat_text("hi", 3)
    assert response.json()["usage"]["completion_tokens"] == 4


def error_of(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert "Traceback" not in body["error"]["message"]
    assert response.headers.get("x-request-id")
    return dict(body["error"])


@pytest.mark.parametrize(
    ("body", "status", "code", "param"),
    [
        (chat_body(model="nope"), 404, "model_not_found", "model"),
        (chat_body(n=2), 400, "unsupported_parameter", "n"),
        (chat_body(logprobs=True), 400, "unsupported_parameter", "logprobs"),
        (chat_body(tools=[{"type": "function"}]), 400, "unsupported_parameter", "tools"),
        (
            chat_body(response_format={"type": "json_object"}),
            400,
            "unsupported_parameter",
            "response_format",
        ),
        (chat_body(frequency_penalty=0.5), 400, "unsupported_parameter", "frequency_penalty"),
        (chat_body(max_tokens=65), 400, "invalid_value", "max_tokens"),
        (chat_body(max_completion_tokens=65), 400, "invalid_value", "max_completion_tokens"),
        (chat_body("y" * 3000), 400, "context_length_exceeded", "messages"),
        (chat_body("y" * 2020, max_tokens=60), 400, "context_length_exceeded", "messages"),
        (chat_body(temperature=3), 400, "invalid_value", "temperature"),
        (chat_body(stream_options={"include_usage": True}), 400, "invalid_value", "stream_options"),
        (
            {"model": MODEL, "messages": [{"role": "Bad Role!", "content": "x"}]},
            400,
            "invalid_value",
            "messages[0].role",
        ),
    ],
)
async def test_chat_errors(body: dict[str, Any], status: int, code: str, param: str) -> None:
    async with frontend(max_context_tokens=2070) as fe:
        response = await fe.client.post("/v1/chat/completions", json=body)
        errors = fe.metric("tandem_frontend_errors_total", code=code)
        requests = fe.metric("tandem_frontend_requests_total", endpoint="chat", status=str(status))
    assert response.status_code == status
    error = error_of(response)
    assert (error["code"], error["param"]) == (code, param)
    assert (errors, requests) == (1, 1)


@pytest.mark.parametrize(
    ("body", "status", "code", "param"),
    [
        ({"model": MODEL, "prompt": ["a", "b"]}, 400, "unsupported_parameter", "prompt"),
        ({"model": MODEL, "prompt": [999999]}, 400, "invalid_value", "prompt"),
        ({"model": MODEL, "prompt": "x", "echo": True}, 400, "unsupported_parameter", "echo"),
        ({"model": MODEL, "prompt": "x", "best_of": 2}, 400, "unsupported_parameter", "best_of"),
        ({"model": MODEL}, 400, "invalid_value", "prompt"),
    ],
)
async def test_completion_errors(body: dict[str, Any], status: int, code: str, param: str) -> None:
    async with frontend() as fe:
        response = await fe.client.post("/v1/completions", json=body)
    assert response.status_code == status
    assert (error_of(response)["code"], error_of(response)["param"]) == (code, param)


async def test_invalid_json_and_non_object_bodies() -> None:
    async with frontend() as fe:
        broken = await fe.client.post("/v1/chat/completions", content=b"{nope")
        array = await fe.client.post("/v1/chat/completions", content=b"[1]")
    assert broken.status_code == 400 and error_of(broken)["code"] == "invalid_json"
    assert array.status_code == 400 and error_of(array)["code"] == "invalid_value"


async def test_oversized_body_is_a_413() -> None:
    async with frontend(max_body_bytes=4096) as fe:
        response = await fe.client.post("/v1/chat/completions", json=chat_body("z" * 5000))
    assert response.status_code == 413
    assert error_of(response)["code"] == "request_too_large"


async def test_queue_full_is_a_429_with_retry_after() -> None:
    async with frontend() as fe:
        fe.workers["d1"].prefill_delay = 0.5
        fe.router.config = type(fe.router.config)(
            policy=fe.router.config.policy, max_queued_requests=1, retry_after_seconds=2
        )
        first = asyncio.create_task(fe.client.post("/v1/chat/completions", json=chat_body()))
        async with asyncio.timeout(5):
            while fe.workers["d1"].decode_calls == 0:  # noqa: ASYNC110 - polling a fake
                await asyncio.sleep(0.01)
        refused = await fe.client.post("/v1/chat/completions", json=chat_body())
        assert (await first).status_code == 200
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "2"
    assert error_of(refused)["code"] == "rate_limit_exceeded"


async def test_no_decode_worker_is_a_503_and_not_ready() -> None:
    async with frontend() as fe:
        fe.workers["d1"].kill()
        await fe.router.poll_once()
        response = await fe.client.post("/v1/chat/completions", json=chat_body())
        ready = await fe.client.get("/readyz")
        live = await fe.client.get("/healthz")
    assert response.status_code == 503
    assert error_of(response)["code"] == "no_worker_available"
    assert ready.status_code == 503 and ready.json()["ready"] is False
    assert live.status_code == 200


async def test_models_ready_and_metrics() -> None:
    async with frontend() as fe:
        models = (await fe.client.get("/v1/models")).json()
        ready = await fe.client.get("/readyz")
        await fe.client.post("/v1/chat/completions", json=chat_body("x" * 300))
        await fe.client.post("/v1/chat/completions", json=chat_body("x"))
        metrics = (await fe.client.get("/metrics")).text
        only = await fe.client.get(
            "/metrics",
            params={"name[]": "tandem_router_diverted_prompts_total"},
        )
    assert [m["id"] for m in models["data"]] == [MODEL]
    assert models["data"][0]["max_model_len"] == 2048 + 64  # no engine window given
    assert ready.status_code == 200
    assert {w["address"] for w in ready.json()["workers"]} == {"p1", "d1"}
    for line in (
        'tandem_router_prefill_decisions_total{path="remote",reason="long_prompt"} 1.0',
        'tandem_router_prefill_decisions_total{path="local",reason="short_prompt"} 1.0',
        'tandem_frontend_requests_total{endpoint="chat",status="200"} 2.0',
        'tandem_router_queue_depth_tokens{pool="prefill"} 0.0',
        'tandem_router_workers{pool="decode",state="healthy"} 1.0',
        'tandem_frontend_time_to_first_token_seconds_count{path="remote"} 1.0',
    ):
        assert line in metrics
    # ?name[]= narrows the exposition to those families (the autoscaler's poll).
    families = {line.split()[2] for line in only.text.splitlines() if line.startswith("# TYPE")}
    assert families == {"tandem_router_diverted_prompts_total"}
    assert "tandem_router_diverted_prompts_total 0.0" in only.text.splitlines()


async def test_each_request_reports_its_mean_inter_token_latency() -> None:
    """The SLO's ITL (spec.slo.itlP90Seconds) is a mean per request: the tokens after
    the first share the time from the first token to the last."""
    async with frontend() as fe:
        for _ in range(2):
            response = await fe.client.post("/v1/chat/completions", json=chat_body(max_tokens=6))
            assert response.status_code == 200
    later_tokens = fe.metric("tandem_frontend_inter_token_latency_seconds_count")
    assert later_tokens == 2 * 5
    assert fe.metric("tandem_frontend_request_inter_token_latency_seconds_count") == 2
    means = fe.metric("tandem_frontend_request_inter_token_latency_seconds_sum")
    gaps = fe.metric("tandem_frontend_inter_token_latency_seconds_sum")
    assert means > 0
    assert means * 5 == pytest.approx(gaps)


def test_the_frontend_reports_when_its_certificate_expires(tmp_path: Path) -> None:
    write_bundle(tmp_path, CredentialBundle.of(issue("demo", datetime.now(UTC))))
    store = CredentialStore(tmp_path)
    registry = CollectorRegistry()
    build_frontend(make_config(), InProcessCluster([]), registry=registry, credentials=store)
    expiry = store.current().not_after.timestamp()
    assert registry.get_sample_value(CERTIFICATE_EXPIRY) == expiry


async def test_unknown_route_and_method() -> None:
    async with frontend() as fe:
        missing = await fe.client.get("/v1/nothing")
        wrong = await fe.client.get("/v1/chat/completions")
        slash = await fe.client.post("/v1/chat/completions/", json=chat_body())
    assert missing.status_code == 404 and error_of(missing)["code"] == "not_found"
    assert wrong.status_code == 405 and error_of(wrong)["code"] == "method_not_allowed"
    # Not a bare redirect: an OpenAI error with a request id, like every answer.
    assert slash.status_code == 404 and error_of(slash)["code"] == "not_found"
    assert slash.headers["x-request-id"]


async def test_mid_stream_failure_ends_with_an_error_event() -> None:
    from tandem.router.ports import WorkerErrorKind

    async with frontend() as fe:
        fe.workers["d1"].faults.decode_after_first.append(WorkerErrorKind.INTERNAL)
        response = await fe.client.post(
            "/v1/chat/completions", json=chat_body(max_tokens=10, stream=True)
        )
    events = sse_events(response.text)
    assert response.status_code == 200
    assert events[-1] == "[DONE]"
    assert events[-2]["error"]["code"] == "generation_failed"


async def test_drain_is_on_the_admin_socket_only() -> None:
    """Clients of the public port cannot take the frontend out of service; the admin
    app (served on a Unix socket in the pod) drains it for the preStop hook."""
    async with frontend() as fe:
        for method in ("GET", "POST"):
            refused = await fe.client.request(method, "/drain")
            assert refused.status_code == 404
            assert error_of(refused)["code"] == "not_found"
        assert (await fe.client.get("/readyz")).status_code == 200
        admin = httpx.ASGITransport(app=create_frontend_admin_app(fe.router))
        async with httpx.AsyncClient(transport=admin, base_url="http://admin") as local:
            bad = await local.post("/drain", params={"grace_seconds": "soon"})
            assert bad.status_code == 400
            drained = await local.post("/drain", params={"grace_seconds": "0"})
        assert drained.json() == {"in_flight": 0}
        assert (await fe.client.get("/readyz")).status_code == 503
