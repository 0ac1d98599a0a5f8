"""The time to first token, phase by phase: the frontend's histograms and the request's
spans (real app, serving and router in-process, fake workers)."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import StatusCode

from tandem.frontend.metrics import TTFT_PHASES
from tandem_dev.doubles.span_recorder import by_name, recording

from .harness import MODEL, Frontend, frontend

PHASES = "tandem_frontend_ttft_phase_seconds"
LONG_PROMPT = "x" * 300  # over the harness's min_prefill_tokens (100): prefilled remotely


def completion(prompt: str) -> dict[str, object]:
    return {"model": MODEL, "prompt": prompt, "max_tokens": 3}


def counts(fe: Frontend, path: str) -> dict[str, float]:
    return {phase: fe.metric(f"{PHASES}_count", phase=phase, path=path) for phase in TTFT_PHASES}


async def test_a_remote_prefill_is_observed_in_every_phase() -> None:
    async with frontend() as fe:
        response = await fe.client.post("/v1/completions", json=completion(LONG_PROMPT))
        assert response.status_code == 200
        remote, local = counts(fe, "remote"), counts(fe, "local")
        kv_seconds = fe.metric(f"{PHASES}_sum", phase="kv_transfer", path="remote")
    # "queue" too: without a tenant gate nothing holds a request, which is 0 s, observed.
    assert remote == dict.fromkeys(TTFT_PHASES, 1.0)
    assert set(local.values()) == {0.0}
    assert kv_seconds == 0.001  # what the fake decode worker reported for its KV pull


async def test_a_local_prefill_has_no_prefill_or_kv_transfer_phase() -> None:
    async with frontend() as fe:
        response = await fe.client.post("/v1/completions", json=completion("hi"))
        assert response.status_code == 200
        local = counts(fe, "local")
    assert local == {
        "queue": 1.0,
        "tokenize": 1.0,
        "route": 1.0,
        "prefill": 0.0,
        "kv_transfer": 0.0,
        "first_token": 1.0,
    }


async def test_the_request_span_parents_the_frontend_and_router_spans() -> None:
    with recording() as finished:
        async with frontend() as fe:
            response = await fe.client.post("/v1/completions", json=completion(LONG_PROMPT))
            assert response.status_code == 200
    spans = by_name(finished)
    root = spans["frontend.completions"]
    assert root.parent is None
    assert root.attributes is not None
    assert root.attributes["tandem.request_id"] == response.headers["x-request-id"]
    assert root.attributes["tandem.route.path"] == "remote"
    assert root.attributes["http.response.status_code"] == 200
    for name in ("frontend.tokenize", "router.route", "router.prefill", "router.decode"):
        span = spans[name]
        assert span.parent is not None and span.parent.span_id == root.context.span_id, name
        assert span.context.trace_id == root.context.trace_id, name
    route = spans["router.route"].attributes
    assert route is not None
    assert route["tandem.route.path"] == "remote"
    assert route["tandem.route.reason"] == root.attributes["tandem.route.reason"]
    assert route["tandem.route.prefill_worker"] == "p1"
    assert route["tandem.route.decode_worker"] == "d1"
    assert route["tandem.route.prompt_tokens"] >= 300  # type: ignore[operator]
    # Spans are started and ended by hand around the stream: none is left current.
    assert not trace.get_current_span().get_span_context().is_valid


async def test_a_failed_request_ends_its_span_with_the_status() -> None:
    with recording() as finished:
        async with frontend() as fe:
            response = await fe.client.post(
                "/v1/completions", json={**completion("hi"), "model": "nope"}
            )
    assert response.status_code == 404
    root = by_name(finished)["frontend.completions"]
    assert root.attributes is not None
    assert root.attributes["http.response.status_code"] == 404
    assert root.status.status_code is StatusCode.UNSET  # the client's mistake, not ours
