"""prepare_request: limits, defaults and sampling, as a table."""

from __future__ import annotations

from typing import Any

import pytest

from tandem.errors import TandemError
from tandem.frontend.preparation import (
    DEFAULT_TEMPERATURE,
    RequestContext,
    ServingConfig,
    prepare_request,
)
from tandem.frontend.protocol import ChatCompletionRequest

CONFIG = ServingConfig("m", max_input_tokens=100, max_output_tokens=20, max_context_tokens=110)
CTX = RequestContext("r", 0.0)
STOPS = (7, 8)


def prepare(prompt_len: int, max_tokens: int | None = None, **fields: Any) -> Any:
    request = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "x"}], **fields}
    )
    return prepare_request(
        request, CTX, [1] * prompt_len, max_tokens, "max_tokens", "messages", CONFIG, STOPS
    )


@pytest.mark.parametrize(
    ("prompt_len", "max_tokens", "expected_max"),
    [(10, None, 20), (95, None, 15), (100, None, 10), (10, 5, 5), (90, 20, 20), (1, 1, 1)],
)
def test_max_tokens(prompt_len: int, max_tokens: int | None, expected_max: int) -> None:
    assert prepare(prompt_len, max_tokens).sampling.max_tokens == expected_max


@pytest.mark.parametrize(
    ("prompt_len", "max_tokens", "code", "param"),
    [
        (101, None, "context_length_exceeded", "messages"),
        (0, None, "invalid_value", "messages"),
        (10, 21, "invalid_value", "max_tokens"),
        (95, 20, "context_length_exceeded", "messages"),
    ],
)
def test_limits(prompt_len: int, max_tokens: int | None, code: str, param: str) -> None:
    with pytest.raises(TandemError) as caught:
        prepare(prompt_len, max_tokens)
    assert (caught.value.code, caught.value.param, caught.value.http_status) == (code, param, 400)


def test_context_window_smaller_than_input_plus_output() -> None:
    config = ServingConfig("m", max_input_tokens=100, max_output_tokens=50, max_context_tokens=60)
    request = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user"}]})
    prepared = prepare_request(request, CTX, [1] * 55, None, "max_tokens", "messages", config, ())
    assert prepared.sampling.max_tokens == 5


@pytest.mark.parametrize(
    ("fields", "temperature", "top_p", "seed"),
    [
        ({}, DEFAULT_TEMPERATURE, 1.0, None),
        ({"temperature": 0}, 0.0, 1.0, None),
        ({"top_p": 0}, 0.0, 1.0, None),  # top_p=0 keeps only the most likely token
        ({"temperature": 0.5, "top_p": 0.9, "seed": 3}, 0.5, 0.9, 3),
        ({"seed": -1}, DEFAULT_TEMPERATURE, 1.0, 2**64 - 1),
    ],
)
def test_sampling(
    fields: dict[str, Any], temperature: float, top_p: float, seed: int | None
) -> None:
    sampling = prepare(10, **fields).sampling
    assert (sampling.temperature, sampling.top_p, sampling.seed) == (temperature, top_p, seed)
    assert sampling.stop_token_ids == STOPS


@pytest.mark.parametrize(
    ("fields", "stops", "usage", "ids"),
    [
        ({}, (), False, False),
        ({"stop": "x"}, ("x",), False, False),
        (
            {"stop": ["a", "b"], "stream": True, "stream_options": {"include_usage": True}},
            ("a", "b"),
            True,
            False,
        ),
        ({"return_token_ids": True}, (), False, True),
        ({"return_token_ids": True, "stream": True}, (), False, False),
    ],
)
def test_request_options(
    fields: dict[str, Any], stops: tuple[str, ...], usage: bool, ids: bool
) -> None:
    prepared = prepare(10, **fields)
    assert (prepared.stops, prepared.include_usage, prepared.return_token_ids) == (
        stops,
        usage,
        ids,
    )
