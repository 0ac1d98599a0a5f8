"""Request validation: what is accepted, what is refused, and which field is named."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tandem.frontend.errors import InvalidJsonError, InvalidRequestError
from tandem.frontend.protocol import ChatCompletionRequest, CompletionRequest
from tandem.frontend.validation import format_param, parse_request


def dump(data: object) -> bytes:
    return json.dumps(data).encode()


CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("patch", "param"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"content": "x"}]}, "messages[0].role"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages[0].content",
        ),
        ({"messages": "hello"}, "messages"),
        ({"model": 5}, "model"),
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": "ten"}, "max_tokens"),
        ({"max_completion_tokens": -1}, "max_completion_tokens"),
        ({"n": 0}, "n"),
        ({"seed": 1 << 64}, "seed"),
        ({"seed": -(1 << 63) - 1}, "seed"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stop": ""}, "stop"),
        ({"stream": "yes"}, "stream"),
        ({"stream_options": {"include_usage": "x"}}, "stream_options.include_usage"),
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"max_tokens": "5"}, "max_tokens"),
        ({"max_tokens": 5.0}, "max_tokens"),
        ({"n": True}, "n"),
    ],
)
def test_invalid_chat_fields_are_named(patch: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        parse_request(ChatCompletionRequest, dump({**CHAT, **patch}))
    assert caught.value.param == param
    assert caught.value.http_status == 400
    assert param.split("[")[0].split(".")[0] in caught.value.message


@pytest.mark.parametrize(
    "patch",
    [
        {},
        {"temperature": 0, "top_p": 0, "seed": -5, "stop": "END", "max_tokens": 5},
        {"stop": ["a", "b"], "stream": True, "stream_options": {"include_usage": True}},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}]},
        {"messages": [{"role": "assistant", "content": None}, {"role": "user", "content": "x"}]},
        {"user": "u", "metadata": {"k": "v"}, "some_future_field": [1, 2]},
    ],
)
def test_valid_chat_requests(patch: dict[str, Any]) -> None:
    parsed = parse_request(ChatCompletionRequest, dump({**CHAT, **patch}))
    assert parsed.model == "m"


def test_unknown_fields_are_kept_aside() -> None:
    parsed = parse_request(ChatCompletionRequest, dump({**CHAT, "frobnicate": 1}))
    assert parsed.model_extra == {"frobnicate": 1}


def test_content_parts_join_as_text() -> None:
    parts = [{"type": "text", "text": "ab"}, {"type": "text", "text": "cd"}]
    parsed = parse_request(
        ChatCompletionRequest, dump({**CHAT, "messages": [{"role": "user", "content": parts}]})
    )
    assert parsed.messages[0].text() == "abcd"


@pytest.mark.parametrize(
    ("prompt", "ok"),
    [
        ("text", True),
        ([1, 2, 3], True),
        (["one"], True),
        ([[1, 2]], True),
        ([], False),
        ([-1], False),
        ([[]], False),
        (5, False),
        ([1.5], False),
    ],
)
def test_completion_prompt_shapes(prompt: object, ok: bool) -> None:
    body = {"model": "m", "prompt": prompt}
    if ok:
        assert parse_request(CompletionRequest, dump(body)).prompt == prompt
    else:
        with pytest.raises(InvalidRequestError) as caught:
            parse_request(CompletionRequest, dump(body))
        assert caught.value.param is not None and caught.value.param.startswith("prompt")


@pytest.mark.parametrize("body", [b"", b"{", b"\xff\xfe", b"[" * 100000 + b"]" * 100000])
def test_bad_json_is_a_400(body: bytes) -> None:
    with pytest.raises(InvalidJsonError) as caught:
        parse_request(ChatCompletionRequest, body)
    assert caught.value.http_status == 400 and caught.value.code == "invalid_json"


@pytest.mark.parametrize("data", [[], "x", 3, None])
def test_body_must_be_an_object(data: object) -> None:
    with pytest.raises(InvalidRequestError):
        parse_request(ChatCompletionRequest, dump(data))


@pytest.mark.parametrize(
    ("loc", "expected"),
    [
        (("messages", 0, "content"), "messages[0].content"),
        (("stop", "list[constrained-str]", 2), "stop[2]"),
        (("prompt", "str"), "prompt"),
        ((), None),
    ],
)
def test_format_param(loc: tuple[object, ...], expected: str | None) -> None:
    assert format_param(loc) == expected
