"""Generated HTTP requests (hypothesis) against a running frontend: no 5xx, every 4xx an
OpenAI error object with ``x-request-id``, the server alive and serving afterwards.

Requests vary the method, path, query, content type and body: random bytes, random JSON,
and valid chat/completion bodies with fields replaced by random JSON (including
``stream: true``, whose SSE replies are read to the end). Hypothesis shrinks a failure to
the smallest request that shows it.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)  # fmt: skip
FIELDS = ["model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature",
          "top_p", "seed", "n", "stop", "stream", "stream_options", "logprobs", "tools",
          "response_format", "echo", "best_of", "user", "presence_penalty"]  # fmt: skip
NUMBERS = st.sampled_from([0, -1, 1, 2**31, 2**63, -(2**63), 1e308, -1e-308, 0.5])
PATHS = ["/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/models/reference",
         "/v1/embeddings", "/v1/chat/completions/", "/v1", "/", "/v1/%00", "/v1/ü"]  # fmt: skip
POST_PATHS = PATHS[:2]
CONTENT_TYPES = ["application/json", "application/json; charset=utf-8", "text/plain",
                 "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                 ""]  # fmt: skip


@st.composite
def bodies(draw: st.DrawFn, model: str) -> bytes:
    kind = draw(st.sampled_from(["mutated", "mutated", "random-json", "bytes", "text"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "text":
        return draw(st.text(max_size=100)).encode("utf-8", "surrogatepass")
    if kind == "random-json":
        return json.dumps(draw(JSON)).encode()
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "hello"}],
                            "prompt": "hi", "max_tokens": 3}  # fmt: skip
    for field in draw(st.lists(st.sampled_from(FIELDS), max_size=4)):
        body[field] = draw(JSON | NUMBERS)
    return json.dumps(body).encode()


@st.composite
def requests(draw: st.DrawFn, model: str) -> tuple[str, str, dict[str, str], bytes]:
    """(method, path with query, headers, body)."""
    if draw(st.integers(0, 9)) < 8:  # mostly the two endpoints that take bodies
        method, path = "POST", draw(st.sampled_from(POST_PATHS))
    else:
        method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]))
        path = draw(st.sampled_from(PATHS))
    query = draw(st.sampled_from(["", "?stream=true", "?x=%ff", "?" + "a=1&" * 50]))
    headers = {"content-type": draw(st.sampled_from(CONTENT_TYPES))}
    if draw(st.booleans()):
        headers["x-request-id"] = draw(st.text(alphabet="abc-_012", max_size=80))
    return method, path + query, headers, draw(bodies(model))


@dataclass(frozen=True, slots=True)
class FuzzReport:
    examples: int
    statuses: dict[int, int]
    seconds: float
    serving_after: bool


def _check(response: httpx.Response, seen: Counter[int], what: object) -> None:
    seen[response.status_code] += 1
    assert response.status_code < 500, (what, response.status_code, response.text[:500])
    assert response.headers.get("x-request-id"), (what, "no x-request-id")
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}, (what, error)
        assert isinstance(error["message"], str) and error["message"], (what, error)


def fuzz_frontend(base_url: str, model: str, examples: int) -> FuzzReport:
    """``examples`` generated requests against the frontend at ``base_url`` (no /v1);
    raises AssertionError (shrunk by hypothesis) at the first bad answer."""
    seen: Counter[int] = Counter()
    started = time.monotonic()
    with httpx.Client(base_url=base_url, timeout=30) as client:

        @settings(max_examples=examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(request=requests(model))
        def check(request: tuple[str, str, dict[str, str], bytes]) -> None:
            method, path, headers, body = request
            content = body if method in ("POST", "PUT", "PATCH") else None
            with client.stream(method, path, content=content, headers=headers) as response:
                response.read()  # an SSE stream to its end
                _check(response, seen, request)

        check()
        models = client.get("/v1/models")
        serving = models.status_code == 200 and model in models.text
    return FuzzReport(sum(seen.values()), dict(sorted(seen.items())),
                      time.monotonic() - started, serving)  # fmt: skip
