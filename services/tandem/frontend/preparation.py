"""From a validated OpenAI request to what the router needs (pure functions).

Model name, unsupported features (refused with a 400 naming the field, never silently
ignored), prompt limits and the context window, and sampling defaults.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tandem.engines.base import SamplingParams
from tandem.frontend.errors import (
    ContextLengthExceededError,
    InvalidRequestError,
    ModelNotFoundError,
    UnsupportedParameterError,
)
from tandem.frontend.protocol import (
    UINT64_RANGE,
    ChatCompletionRequest,
    CompletionRequest,
    SamplingFields,
)
from tandem.tokenization import Tokenizer

# OpenAI's documented default sampling temperature.
DEFAULT_TEMPERATURE = 1.0


@dataclass(frozen=True, slots=True)
class ServingConfig:
    served_model: str  # the id /v1/models lists and responses carry
    max_input_tokens: int
    max_output_tokens: int
    max_context_tokens: int  # prompt + completion
    accepted_models: frozenset[str] = frozenset()  # further names accepted in `model`
    created: int = 0  # unix time the model was loaded (for /v1/models)


# The tenant of every request to a frontend that takes no API keys.
ANONYMOUS_TENANT = "anonymous"


@dataclass(frozen=True, slots=True)
class RequestContext:
    request_id: str
    arrival: float  # monotonic clock reading when the request arrived
    tenant: str = ANONYMOUS_TENANT  # whose API key it came with


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A validated request, ready for the router."""

    ctx: RequestContext
    model: str
    prompt: list[int]
    sampling: SamplingParams
    stops: tuple[str, ...]
    include_usage: bool
    return_token_ids: bool = False


def check_model(model: str, config: ServingConfig) -> None:
    if model != config.served_model and model not in config.accepted_models:
        raise ModelNotFoundError(
            f"The model '{model}' does not exist; this endpoint serves '{config.served_model}'.",
            param="model",
        )


def completion_prompt(
    prompt: str | list[int] | list[str] | list[list[int]], tokenizer: Tokenizer
) -> list[int]:
    """Token ids of a legacy completion prompt (text gets a BOS; one prompt only)."""
    if isinstance(prompt, str):
        return tokenizer.encode(prompt, add_bos=True)
    if not prompt:
        raise InvalidRequestError("prompt must not be empty", param="prompt")
    head = prompt[0]
    if isinstance(head, int):
        ids = [t for t in prompt if isinstance(t, int)]
    elif len(prompt) > 1:
        raise UnsupportedParameterError(
            "batched prompts are not supported; send one prompt per request",
            param="prompt",
        )
    elif isinstance(head, str):
        return tokenizer.encode(head, add_bos=True)
    else:
        ids = list(head)
    vocab = tokenizer.vocab_size
    if any(t >= vocab for t in ids):
        raise InvalidRequestError(
            f"prompt token ids must be below the vocabulary size {vocab}", param="prompt"
        )
    return ids


def prepare_request(
    request: SamplingFields,
    ctx: RequestContext,
    prompt: list[int],
    max_tokens: int | None,
    max_tokens_param: str,
    prompt_param: str,
    config: ServingConfig,
    stop_token_ids: tuple[int, ...],
) -> PreparedRequest:
    """Limits and sampling for one request (pure): raises the 400s for lengths."""
    cfg = config
    if not prompt:
        raise InvalidRequestError("the prompt is empty", param=prompt_param)
    if len(prompt) > cfg.max_input_tokens:
        raise ContextLengthExceededError(
            f"The prompt has {len(prompt)} tokens; this model accepts at most "
            f"{cfg.max_input_tokens} input tokens.",
            param=prompt_param,
        )
    room = cfg.max_context_tokens - len(prompt)
    if max_tokens is None:
        max_tokens = min(cfg.max_output_tokens, room)
        if max_tokens < 1:
            raise ContextLengthExceededError(
                f"The prompt has {len(prompt)} tokens, which leaves no room to generate "
                f"within the {cfg.max_context_tokens}-token context.",
                param=prompt_param,
            )
    elif max_tokens > cfg.max_output_tokens:
        raise InvalidRequestError(
            f"{max_tokens_param} is too large: {max_tokens}. This model generates at "
            f"most {cfg.max_output_tokens} tokens per request.",
            param=max_tokens_param,
        )
    elif max_tokens > room:
        raise ContextLengthExceededError(
            f"This model's context is {cfg.max_context_tokens} tokens; the request asks "
            f"for {len(prompt) + max_tokens} ({len(prompt)} in the prompt, {max_tokens} "
            "to generate). Shorten the prompt or lower "
            f"{max_tokens_param}.",
            param=prompt_param,
        )
    temperature = DEFAULT_TEMPERATURE if request.temperature is None else request.temperature
    top_p = 1.0 if request.top_p is None else request.top_p
    if top_p == 0.0:  # OpenAI accepts 0: only the most likely token survives
        temperature, top_p = 0.0, 1.0
    sampling = SamplingParams(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        seed=None if request.seed is None else request.seed % UINT64_RANGE,
        stop_token_ids=stop_token_ids,
    )
    include_usage = bool(request.stream_options and request.stream_options.include_usage)
    return PreparedRequest(
        ctx=ctx,
        model=request.model,
        prompt=prompt,
        sampling=sampling,
        stops=request.stop_strings(),
        include_usage=include_usage,
        return_token_ids=request.return_token_ids and not request.stream,
    )


def reject_unsupported_common(request: SamplingFields) -> None:
    if request.n != 1:
        raise UnsupportedParameterError(
            f"n={request.n} is not supported: only one choice per request (n=1)", param="n"
        )
    if request.stream_options is not None and not request.stream:
        raise InvalidRequestError(
            "stream_options is only allowed when stream is true", param="stream_options"
        )
    for name in ("presence_penalty", "frequency_penalty"):
        value = getattr(request, name)
        if value:
            raise UnsupportedParameterError(f"{name} is not supported (use 0)", param=name)
    if request.logit_bias:
        raise UnsupportedParameterError("logit_bias is not supported", param="logit_bias")


def reject_unsupported_chat(request: ChatCompletionRequest) -> None:
    if request.logprobs or request.top_logprobs:
        param = "logprobs" if request.logprobs else "top_logprobs"
        raise UnsupportedParameterError("logprobs are not supported", param=param)
    if request.tools or request.functions:
        param = "tools" if request.tools else "functions"
        raise UnsupportedParameterError("tool calling is not supported", param=param)
    if request.response_format is not None and request.response_format.type != "text":
        raise UnsupportedParameterError(
            f"response_format {request.response_format.type} is not supported",
            param="response_format",
        )


def reject_unsupported_completion(request: CompletionRequest) -> None:
    checks: Sequence[tuple[bool, str]] = (
        (request.echo, "echo"),
        (request.suffix is not None, "suffix"),
        (bool(request.logprobs), "logprobs"),
        (request.best_of not in (None, 1), "best_of"),
    )
    for unsupported, param in checks:
        if unsupported:
            raise UnsupportedParameterError(f"{param} is not supported", param=param)
