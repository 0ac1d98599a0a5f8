"""OpenAI wire models for the frontend: requests (validated) and responses (built).

Requests accept fields we do not know (clients send many) and log the ignored names
once each. Fields we know but whose requested behaviour we do not provide (``n > 1``,
``logprobs``, tools, JSON mode, non-zero penalties) are rejected by the serving layer
with a 400 naming the field, never silently ignored.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

logger = logging.getLogger(__name__)

# Distinct ignored field names already logged; bounded so hostile clients cannot grow it.
_LOGGED_EXTRA_FIELDS: set[str] = set()
_MAX_LOGGED_EXTRA_FIELDS = 256

UINT64_RANGE = 1 << 64
SEED_MIN = -(1 << 63)


class OpenAIRequestModel(BaseModel):
    """Base for request bodies: unknown fields are kept aside and logged, not rejected."""

    model_config = ConfigDict(extra="allow", frozen=True)

    @model_validator(mode="after")
    def _log_ignored_fields(self) -> OpenAIRequestModel:
        extra = self.model_extra
        if extra:
            new = [name for name in extra if name not in _LOGGED_EXTRA_FIELDS]
            if new and len(_LOGGED_EXTRA_FIELDS) < _MAX_LOGGED_EXTRA_FIELDS:
                _LOGGED_EXTRA_FIELDS.update(new)
                logger.info("ignoring unknown request fields %s", sorted(new)[:16])
        return self


class StreamOptions(OpenAIRequestModel):
    include_usage: bool = False


class TextContentPart(OpenAIRequestModel):
    type: Literal["text"]
    text: str


class ChatMessageIn(OpenAIRequestModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    # ``None`` is legal for assistant turns that only carried tool calls.
    content: str | list[TextContentPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


Probability = Annotated[float, Field(ge=0.0, le=1.0)]
Temperature = Annotated[float, Field(ge=0.0, le=2.0)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]
TokenCount = Annotated[int, Field(ge=1)]
Seed = Annotated[int, Field(ge=SEED_MIN, lt=UINT64_RANGE)]
StopStrings = Annotated[list[Annotated[str, Field(min_length=1)]], Field(max_length=4)]


class SamplingFields(OpenAIRequestModel):
    """Fields shared by chat and legacy completions."""

    model: str
    max_tokens: TokenCount | None = None
    temperature: Temperature | None = None
    top_p: Probability | None = None
    seed: Seed | None = None
    n: Annotated[int, Field(ge=1, le=128)] = 1
    stop: Annotated[str, Field(min_length=1)] | StopStrings | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    # Tandem extension: non-streaming choices also carry the generated token ids.
    return_token_ids: bool = False
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None

    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        if isinstance(self.stop, str):
            return (self.stop,)
        return tuple(self.stop)


class ResponseFormat(OpenAIRequestModel):
    type: Literal["text", "json_object", "json_schema"]


class ChatCompletionRequest(SamplingFields):
    messages: Annotated[list[ChatMessageIn], Field(min_length=1)]
    max_completion_tokens: TokenCount | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    functions: list[dict[str, Any]] | None = None
    response_format: ResponseFormat | None = None


TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


class CompletionRequest(SamplingFields):
    # One prompt only (n=1 semantics): a string, token ids, or a one-element batch.
    prompt: (
        str
        | TokenIds
        | Annotated[list[str], Field(min_length=1)]
        | Annotated[list[TokenIds], Field(min_length=1)]
    )
    echo: bool = False
    suffix: str | None = None
    logprobs: Annotated[int, Field(ge=0, le=5)] | None = None
    best_of: Annotated[int, Field(ge=1, le=128)] | None = None


# --------------------------------------------------------------------------- responses


class ResponseModel(BaseModel):
    model_config = ConfigDict(frozen=True)


class Usage(ResponseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatMessageOut(ResponseModel):
    role: Literal["assistant"] = "assistant"
    content: str
    # A reasoning model's thinking (gpt-oss's analysis channel), as vLLM and SGLang
    # return it; absent for other models.
    reasoning_content: str | None = Field(default=None, exclude_if=lambda v: v is None)


class ChatChoice(ResponseModel):
    index: int = 0
    message: ChatMessageOut
    finish_reason: str | None
    logprobs: None = None
    token_ids: list[int] | None = Field(default=None, exclude_if=lambda v: v is None)


class ChatCompletionResponse(ResponseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class DeltaMessage(ResponseModel):
    """Only the fields a chunk changes are sent (OpenAI omits the others)."""

    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None

    @model_serializer
    def _present_fields(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.role is not None:
            out["role"] = self.role
        if self.content is not None:
            out["content"] = self.content
        if self.reasoning_content is not None:
            out["reasoning_content"] = self.reasoning_content
        return out


class ChatChunkChoice(ResponseModel):
    index: int = 0
    delta: DeltaMessage
    finish_reason: str | None = None
    logprobs: None = None


class ChatCompletionChunk(ResponseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class CompletionChoice(ResponseModel):
    index: int = 0
    text: str
    finish_reason: str | None
    logprobs: None = None
    token_ids: list[int] | None = Field(default=None, exclude_if=lambda v: v is None)


class CompletionResponse(ResponseModel):
    """Both the full legacy completion and each of its stream chunks (same object)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ModelCard(ResponseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "tandem"
    max_model_len: int | None = None


class ModelList(ResponseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorInfo(ResponseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(ResponseModel):
    error: ErrorInfo
