"""Steady load from the official ``openai`` client, and what every request became.

Each request ends as exactly one ``Outcome``:

- ``answered``: a completion with a finish reason (streamed: its last chunk carried one);
- ``clean_error``: an OpenAI error the client can act on: an HTTP status with an
  OpenAI-shaped body (``message``, ``type``), or such an error event ending a stream;
- ``dropped``: the TCP connection broke and the client was told so (a replica died with
  the request on it); nothing silent, but no OpenAI error either;
- ``lost``: neither an answer nor an error: a stream that stopped without a finish reason
  or an error event, an unreadable reply, a 5xx without an OpenAI body;
- ``hung``: nothing by the request's deadline.

Client retries are off, so every failure counts. Several frontends are reached like a
Service in front of replicas: each request goes to the next one, and a refused connection
(a dead replica) moves on to the next; nothing else is retried.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai

MODEL_PLACEHOLDER_HOST = "frontends.invalid"  # the transport replaces it per request


class Outcome(enum.StrEnum):
    ANSWERED = "answered"
    CLEAN_ERROR = "clean_error"
    DROPPED = "dropped"
    LOST = "lost"
    HUNG = "hung"


@dataclass(frozen=True, slots=True)
class RequestRecord:
    index: int
    stream: bool
    started: float  # time.monotonic()
    ended: float
    outcome: Outcome
    first_token: float | None = None  # when the first content arrived (streams)
    status: int | None = None
    detail: str = ""  # the error's message or why it counts as lost
    retry_after: str | None = None

    @property
    def latency(self) -> float:
        return self.ended - self.started


def is_openai_error_body(body: object) -> bool:
    """An OpenAI error object: at least a non-empty ``message`` and a ``type`` (pure)."""
    return (
        isinstance(body, Mapping)
        and isinstance(body.get("message"), str)
        and bool(body["message"])
        and isinstance(body.get("type"), str)
    )


def classify_error(exc: BaseException) -> tuple[Outcome, int | None, str]:
    """What a request that raised ``exc`` became: (outcome, HTTP status, detail) (pure)."""
    if isinstance(exc, openai.APITimeoutError | TimeoutError):
        return Outcome.HUNG, None, "no reply by the deadline"
    if isinstance(exc, openai.APIStatusError):
        clean = is_openai_error_body(exc.body)
        return (Outcome.CLEAN_ERROR if clean else Outcome.LOST), exc.status_code, exc.message
    if isinstance(exc, openai.APIConnectionError | httpx.TransportError):
        return Outcome.DROPPED, None, f"{type(exc).__name__}: {exc}"
    if isinstance(exc, openai.APIError):  # an error event inside a 200 stream
        clean = is_openai_error_body(exc.body)
        return (Outcome.CLEAN_ERROR if clean else Outcome.LOST), None, exc.message
    return Outcome.LOST, None, f"{type(exc).__name__}: {exc}"


class SpreadTransport(httpx.AsyncBaseTransport):
    """Sends each request to the next of ``targets`` (host, port); a refused connection
    tries the following one, as a Service skips an endpoint that is gone."""

    def __init__(self, targets: Sequence[tuple[str, int]]) -> None:
        self._targets = list(targets)
        self._turn = itertools.count()
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        start = next(self._turn)
        failure: httpx.ConnectError | None = None
        for step in range(len(self._targets)):
            host, port = self._targets[(start + step) % len(self._targets)]
            request.url = request.url.copy_with(host=host, port=port)
            request.headers["host"] = f"{host}:{port}"
            try:
                return await self._inner.handle_async_request(request)
            except httpx.ConnectError as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass(frozen=True, slots=True)
class LoadShape:
    concurrency: int = 4
    max_tokens: int = 16
    deadline_s: float = 30.0  # a request not finished by then is hung
    max_requests: int = 5000  # a bound, whatever happens
    think_s: float = 0.0  # pause between one client's requests
    stream_every: int = 2  # request i streams when i % stream_every == stream_every - 1
    # Request i's user message.
    prompt: Callable[[int], str] = lambda i: f"Request {i}: say something."


@dataclass
class SteadyLoad:
    """``shape.concurrency`` clients sending back to back from a thread of their own
    until ``stop()``; ``records`` grows as requests finish."""

    targets: Sequence[tuple[str, int]]
    model: str
    shape: LoadShape = field(default_factory=LoadShape)
    records: list[RequestRecord] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _next: int = 0

    def __enter__(self) -> SteadyLoad:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> list[RequestRecord]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.shape.deadline_s + 30)
        return self.snapshot()

    def snapshot(self) -> list[RequestRecord]:
        with self._lock:
            return list(self.records)

    def count(self, outcome: Outcome, *, after: float = 0.0) -> int:
        return sum(1 for r in self.snapshot() if r.outcome is outcome and r.started >= after)

    def wait_answered(self, n: int, *, after: float = 0.0, timeout_s: float = 120.0) -> None:
        """Until ``n`` requests started at or after ``after`` were answered."""
        deadline = time.monotonic() + timeout_s
        while self.count(Outcome.ANSWERED, after=after) < n:
            if time.monotonic() > deadline:
                outcomes = [r.outcome.value for r in self.snapshot()[-10:]]
                raise TimeoutError(f"fewer than {n} answers in {timeout_s:.0f}s; last {outcomes}")
            time.sleep(0.05)

    async def _run(self) -> None:
        transport = SpreadTransport(self.targets)
        async with httpx.AsyncClient(transport=transport, timeout=None) as http:
            client = client_for(http, self.shape.deadline_s)
            await asyncio.gather(*(self._client(client) for _ in range(self.shape.concurrency)))

    async def _client(self, client: openai.AsyncOpenAI) -> None:
        while not self._stop.is_set():
            with self._lock:
                if self._next >= self.shape.max_requests:
                    return
                index, self._next = self._next, self._next + 1
            record = await self._one(client, index)
            with self._lock:
                self.records.append(record)
            if self.shape.think_s:
                await asyncio.sleep(self.shape.think_s)

    async def _one(self, client: openai.AsyncOpenAI, index: int) -> RequestRecord:
        return await send_one(client, self.model, self.shape, index)


async def send_one(
    client: openai.AsyncOpenAI, model: str, shape: LoadShape, index: int
) -> RequestRecord:
    """Request ``index`` of ``shape`` (streamed or not), as one counted outcome."""
    every = shape.stream_every
    stream = index % every == every - 1
    started = time.monotonic()
    progress: dict[str, Any] = {}
    messages: list[Any] = [{"role": "user", "content": shape.prompt(index)}]
    try:
        async with asyncio.timeout(shape.deadline_s):
            if stream:
                outcome, detail = await _streamed(client, model, shape, messages, progress)
            else:
                outcome, detail = await _whole(client, model, shape, messages)
        status: int | None = 200
        retry_after = None
    except Exception as exc:  # every failure becomes a counted outcome
        outcome, status, detail = classify_error(exc)
        retry_after = _retry_after(exc)
    return RequestRecord(index, stream, started, time.monotonic(), outcome,
                         progress.get("first"), status, detail[:300], retry_after)  # fmt: skip


async def _whole(
    client: openai.AsyncOpenAI, model: str, shape: LoadShape, messages: list[Any]
) -> tuple[Outcome, str]:
    reply = await client.chat.completions.create(
        model=model, messages=messages, max_tokens=shape.max_tokens
    )
    if reply.choices and reply.choices[0].finish_reason in ("stop", "length"):
        return Outcome.ANSWERED, ""
    return Outcome.LOST, f"a reply without a finish reason: {reply.model_dump_json()[:200]}"


async def _streamed(
    client: openai.AsyncOpenAI,
    model: str,
    shape: LoadShape,
    messages: list[Any],
    progress: dict[str, Any],
) -> tuple[Outcome, str]:
    chunks = await client.chat.completions.create(
        model=model, messages=messages, max_tokens=shape.max_tokens, stream=True
    )
    finish = None
    async with chunks:
        async for chunk in chunks:
            for choice in chunk.choices:
                if choice.delta.content and "first" not in progress:
                    progress["first"] = time.monotonic()
                finish = choice.finish_reason or finish
    if finish in ("stop", "length"):
        return Outcome.ANSWERED, ""
    return Outcome.LOST, "the stream ended without a finish reason or an error"


def client_for(http: httpx.AsyncClient, deadline_s: float) -> openai.AsyncOpenAI:
    """The official client, retries off, over ``http`` (whose transport picks the
    frontend)."""
    return openai.AsyncOpenAI(
        base_url=f"http://{MODEL_PLACEHOLDER_HOST}/v1",
        api_key="unused",
        max_retries=0,
        timeout=deadline_s + 10,  # the deadline in send_one acts first
        http_client=http,
    )


def _retry_after(exc: BaseException) -> str | None:
    if isinstance(exc, openai.APIStatusError):
        value: str | None = exc.response.headers.get("retry-after")
        return value
    return None
