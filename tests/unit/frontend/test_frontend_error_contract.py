"""Contract: our error bodies parse as openai-python exceptions with the right class,
status, code, param and request id (the official client, in-process transport)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import openai
import pytest

from tandem.router.ports import WorkerErrorKind

from .harness import MODEL, Frontend, frontend


def client_for(fe: Frontend) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url="http://frontend/v1", api_key="unused", max_retries=0, http_client=fe.client
    )


async def chat(client: openai.AsyncOpenAI, **kw: Any) -> Any:
    args: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    return await client.chat.completions.create(**{**args, **kw})


async def _no_setup(fe: Frontend) -> None:
    return None


async def _kill_decode(fe: Frontend) -> None:
    fe.workers["d1"].kill()
    await fe.router.poll_once()


@pytest.mark.parametrize(
    ("kwargs", "setup", "exc_type", "status", "code", "param"),
    [
        ({"model": "missing"}, _no_setup, openai.NotFoundError, 404, "model_not_found", "model"),
        ({"n": 3}, _no_setup, openai.BadRequestError, 400, "unsupported_parameter", "n"),
        (
            {"messages": [{"role": "user", "content": "y" * 5000}]},
            _no_setup,
            openai.BadRequestError,
            400,
            "context_length_exceeded",
            "messages",
        ),
        (
            {"temperature": 9},
            _no_setup,
            openai.BadRequestError,
            400,
            "invalid_value",
            "temperature",
        ),
        ({}, _kill_decode, openai.InternalServerError, 503, "no_worker_available", None),
    ],
)
async def test_errors_map_to_openai_exceptions(
    kwargs: dict[str, Any],
    setup: Callable[[Frontend], Any],
    exc_type: type[openai.APIStatusError],
    status: int,
    code: str,
    param: str | None,
) -> None:
    async with frontend() as fe:
        await setup(fe)
        with pytest.raises(exc_type) as caught:
            await chat(client_for(fe), **kwargs)
    error = caught.value
    assert error.status_code == status
    assert error.code == code
    assert error.param == param
    assert error.request_id == "req1"
    assert isinstance(error.body, dict) and error.body["message"] in error.message
    assert error.type == error.body["type"]


async def test_rate_limit_error_and_retry_after() -> None:
    async with frontend() as fe:
        fe.router.config = type(fe.router.config)(
            policy=fe.router.config.policy, max_queued_requests=1, retry_after_seconds=7
        )
        fe.workers["d1"].prefill_delay = 0.5
        client = client_for(fe)
        first = asyncio.create_task(chat(client))
        async with asyncio.timeout(5):
            while fe.workers["d1"].decode_calls == 0:  # noqa: ASYNC110 - polling a fake
                await asyncio.sleep(0.01)
        with pytest.raises(openai.RateLimitError) as caught:
            await chat(client)
        await first
    assert caught.value.status_code == 429
    assert caught.value.code == "rate_limit_exceeded"
    assert caught.value.response.headers["retry-after"] == "7"


async def test_too_large_is_an_api_status_error() -> None:
    async with frontend(max_body_bytes=2048) as fe:
        with pytest.raises(openai.APIStatusError) as caught:
            await chat(client_for(fe), messages=[{"role": "user", "content": "q" * 4000}])
    assert caught.value.status_code == 413
    assert caught.value.code == "request_too_large"


async def test_mid_stream_error_raises_api_error_in_the_client() -> None:
    async with frontend() as fe:
        fe.workers["d1"].faults.decode_after_first.append(WorkerErrorKind.INTERNAL)
        stream = await chat(client_for(fe), stream=True, max_tokens=10)
        with pytest.raises(openai.APIError) as caught:
            async for _ in stream:
                pass
    assert "generation failed" in caught.value.message


async def test_successful_calls_parse() -> None:
    async with frontend() as fe:
        client = client_for(fe)
        completion = await chat(client, max_tokens=3, temperature=0)
        stream: AsyncIterator[Any] = await chat(
            client, max_tokens=3, temperature=0, stream=True, stream_options={"include_usage": True}
        )
        pieces = [c async for c in stream]
        legacy = await client.completions.create(model=MODEL, prompt="hi", max_tokens=3)
        models = await client.models.list()
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 3
    text = "".join(c.choices[0].delta.content or "" for c in pieces if c.choices)
    assert text == completion.choices[0].message.content
    assert pieces[-1].usage is not None and pieces[-1].usage.completion_tokens == 3
    assert legacy.choices[0].text and legacy.object == "text_completion"
    assert [m.id for m in models.data] == [MODEL]
