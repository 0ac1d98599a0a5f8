"""OpenAI endpoint logic: validate, tokenize, route, assemble responses or SSE chunks.

Each public method returns either a complete response model or an async iterator of
SSE ``data:`` lines, and raises ``TandemError`` for anything a client should see. A
stream is only returned once its first token exists, so admission, routing and
prefill failures still reach the client as proper HTTP statuses; failures after that
end the stream with an OpenAI error event.

Closing a returned stream early (client gone) closes the router's generator, which
cancels the worker call and releases the request's KV on both sides.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

from tandem.errors import TandemError
from tandem.frontend.errors import (
    InvalidRequestError,
)
from tandem.frontend.metrics import FrontendMetrics
from tandem.frontend.preparation import (
    PreparedRequest,
    RequestContext,
    ServingConfig,
    check_model,
    completion_prompt,
    prepare_request,
    reject_unsupported_chat,
    reject_unsupported_common,
    reject_unsupported_completion,
)
from tandem.frontend.protocol import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatMessageOut,
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    DeltaMessage,
    ErrorInfo,
    ErrorResponse,
    ModelCard,
    ModelList,
    Usage,
)
from tandem.frontend.stopping import StopStringMatcher
from tandem.router.messages import GenerationChunk, GenerationRequest, RouteInfo
from tandem.tokenization import ChatMessage, TokenizationError, Tokenizer

logger = logging.getLogger(__name__)

SSE_DONE = "data: [DONE]\n\n"


class TokenGenerator(Protocol):
    """What serving needs from the router."""

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]: ...


@dataclass(slots=True)
class _Progress:
    prompt_tokens: int
    completion_tokens: int = 0
    finish_reason: str = "stop"
    route: RouteInfo | None = None
    token_ids: list[int] | None = None  # collected when the request asked for them


SseStream = AsyncIterator[str]


class OpenAIServing:
    def __init__(
        self,
        config: ServingConfig,
        tokenizer: Tokenizer,
        generator: TokenGenerator,
        metrics: FrontendMetrics,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._tokenizer = tokenizer
        self._generator = generator
        self._stops = tokenizer.stop_token_ids
        self._metrics = metrics
        self._clock = clock
        self._wall_clock = wall_clock

    # ------------------------------------------------------------------ endpoints

    def list_models(self) -> ModelList:
        card = ModelCard(
            id=self.config.served_model,
            created=self.config.created,
            max_model_len=self.config.max_context_tokens,
        )
        return ModelList(data=[card])

    async def create_chat_completion(
        self, request: ChatCompletionRequest, ctx: RequestContext
    ) -> ChatCompletionResponse | SseStream:
        check_model(request.model, self.config)
        reject_unsupported_common(request)
        reject_unsupported_chat(request)
        messages = [ChatMessage(role=m.role, content=m.text()) for m in request.messages]
        try:
            prompt = self._tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        except TokenizationError as exc:
            raise InvalidRequestError(str(exc), param="messages") from None
        max_tokens = request.max_completion_tokens or request.max_tokens
        param = "max_completion_tokens" if request.max_completion_tokens else "max_tokens"
        prepared = prepare_request(
            request, ctx, prompt, max_tokens, param, "messages", self.config, self._stops
        )
        stream, first = await self._start(prepared)
        if request.stream:
            return self._chat_sse(prepared, stream, first)
        text, progress = await self._collect(prepared, stream, first)
        return ChatCompletionResponse(
            id=f"chatcmpl-{ctx.request_id}",
            created=int(self._wall_clock()),
            model=prepared.model,
            choices=[
                ChatChoice(
                    message=ChatMessageOut(content=text),
                    finish_reason=progress.finish_reason,
                    token_ids=progress.token_ids,
                )
            ],
            usage=_usage(progress),
        )

    async def create_completion(
        self, request: CompletionRequest, ctx: RequestContext
    ) -> CompletionResponse | SseStream:
        check_model(request.model, self.config)
        reject_unsupported_common(request)
        reject_unsupported_completion(request)
        prompt = completion_prompt(request.prompt, self._tokenizer)
        prepared = prepare_request(
            request,
            ctx,
            prompt,
            request.max_tokens,
            "max_tokens",
            "prompt",
            self.config,
            self._stops,
        )
        stream, first = await self._start(prepared)
        if request.stream:
            return self._completion_sse(prepared, stream, first)
        text, progress = await self._collect(prepared, stream, first)
        return CompletionResponse(
            id=f"cmpl-{ctx.request_id}",
            created=int(self._wall_clock()),
            model=prepared.model,
            choices=[
                CompletionChoice(
                    text=text, finish_reason=progress.finish_reason, token_ids=progress.token_ids
                )
            ],
            usage=_usage(progress),
        )

    # ------------------------------------------------------------------ preparation

    # ------------------------------------------------------------------ generation

    async def _start(
        self, prepared: PreparedRequest
    ) -> tuple[AsyncIterator[GenerationChunk], GenerationChunk]:
        """Route the request and wait for its first token (errors raise here)."""
        stream = self._generator.generate(
            GenerationRequest(prepared.ctx.request_id, prepared.prompt, prepared.sampling)
        )
        try:
            first = await anext(stream)
        except StopAsyncIteration:
            raise TandemError("the worker returned no tokens") from None
        except BaseException:
            await _aclose(stream)
            raise
        now = self._clock()
        path = first.route.path.value if first.route is not None else "local"
        self._metrics.ttft_seconds.labels(path).observe(now - prepared.ctx.arrival)
        self._metrics.prompt_tokens.inc(len(prepared.prompt))
        return stream, first

    async def _deltas(
        self,
        prepared: PreparedRequest,
        stream: AsyncIterator[GenerationChunk],
        first: GenerationChunk,
        progress: _Progress,
    ) -> AsyncGenerator[str, None]:
        """Text pieces in order; sets ``progress`` as it goes. Closes ``stream``."""
        detokenizer = self._tokenizer.detokenizer()
        matcher = StopStringMatcher(prepared.stops)
        progress.route = first.route
        chunk = first
        last = self._clock()
        try:
            while True:
                count = len(chunk.token_ids)
                progress.completion_tokens += count
                if progress.token_ids is not None:
                    progress.token_ids.extend(chunk.token_ids)
                self._metrics.generation_tokens.inc(count)
                text = detokenizer.push_many(chunk.token_ids)
                if chunk.finish_reason is not None:
                    text += detokenizer.flush()
                out, stopped = matcher.feed(text)
                if out:
                    yield out
                if stopped:
                    progress.finish_reason = "stop"
                    return
                if chunk.finish_reason is not None:
                    tail, stopped = matcher.flush()
                    if tail:
                        yield tail
                    progress.finish_reason = (
                        "stop" if stopped else _finish_reason(chunk.finish_reason)
                    )
                    return
                chunk = await anext(stream)
                now = self._clock()
                if chunk.token_ids:
                    gap = (now - last) / len(chunk.token_ids)
                    for _ in chunk.token_ids:
                        self._metrics.itl_seconds.observe(gap)
                last = now
        finally:
            await _aclose(stream)

    async def _collect(
        self,
        prepared: PreparedRequest,
        stream: AsyncIterator[GenerationChunk],
        first: GenerationChunk,
    ) -> tuple[str, _Progress]:
        progress = _Progress(prompt_tokens=len(prepared.prompt))
        if prepared.return_token_ids:
            progress.token_ids = []
        try:
            pieces = [piece async for piece in self._deltas(prepared, stream, first, progress)]
        finally:
            await _aclose(stream)
        return "".join(pieces), progress

    async def _chat_sse(
        self,
        prepared: PreparedRequest,
        stream: AsyncIterator[GenerationChunk],
        first: GenerationChunk,
    ) -> SseStream:
        chunk_id = f"chatcmpl-{prepared.ctx.request_id}"
        created = int(self._wall_clock())
        exclude = None if prepared.include_usage else {"usage"}

        def event(choices: list[ChatChunkChoice], usage: Usage | None = None) -> str:
            body = ChatCompletionChunk(
                id=chunk_id, created=created, model=prepared.model, choices=choices, usage=usage
            )
            return f"data: {body.model_dump_json(exclude=exclude)}\n\n"

        progress = _Progress(prompt_tokens=len(prepared.prompt))
        deltas = self._deltas(prepared, stream, first, progress)
        # Events ready at the same moment leave in one write (the role event with the
        # first text, the final event with usage and [DONE]); clients see the same SSE.
        pending = event([ChatChunkChoice(delta=DeltaMessage(role="assistant", content=""))])
        # Closing both covers a client that leaves before ``deltas`` ever started.
        async with contextlib.aclosing(deltas), _closing(stream):
            try:
                async for piece in deltas:
                    yield pending + event([ChatChunkChoice(delta=DeltaMessage(content=piece))])
                    pending = ""
            except TandemError as exc:
                yield pending + self._sse_error(exc) + SSE_DONE
                return
            final = ChatChunkChoice(delta=DeltaMessage(), finish_reason=progress.finish_reason)
            usage = event([], _usage(progress)) if prepared.include_usage else ""
            yield pending + event([final]) + usage + SSE_DONE

    async def _completion_sse(
        self,
        prepared: PreparedRequest,
        stream: AsyncIterator[GenerationChunk],
        first: GenerationChunk,
    ) -> SseStream:
        chunk_id = f"cmpl-{prepared.ctx.request_id}"
        created = int(self._wall_clock())
        exclude = None if prepared.include_usage else {"usage"}

        def event(choices: list[CompletionChoice], usage: Usage | None = None) -> str:
            body = CompletionResponse(
                id=chunk_id, created=created, model=prepared.model, choices=choices, usage=usage
            )
            return f"data: {body.model_dump_json(exclude=exclude)}\n\n"

        progress = _Progress(prompt_tokens=len(prepared.prompt))
        deltas = self._deltas(prepared, stream, first, progress)
        async with contextlib.aclosing(deltas), _closing(stream):
            try:
                async for piece in deltas:
                    yield event([CompletionChoice(text=piece, finish_reason=None)])
            except TandemError as exc:
                yield self._sse_error(exc) + SSE_DONE
                return
            final = event([CompletionChoice(text="", finish_reason=progress.finish_reason)])
            usage = event([], _usage(progress)) if prepared.include_usage else ""
            yield final + usage + SSE_DONE

    def _sse_error(self, exc: TandemError) -> str:
        logger.warning("stream ended with an error: %s", exc.message)
        self._metrics.errors.labels(exc.code or exc.type).inc()
        body = ErrorResponse(
            error=ErrorInfo(message=exc.message, type=exc.type, param=exc.param, code=exc.code)
        )
        return f"data: {body.model_dump_json()}\n\n"


def _usage(progress: _Progress) -> Usage:
    return Usage(
        prompt_tokens=progress.prompt_tokens,
        completion_tokens=progress.completion_tokens,
        total_tokens=progress.prompt_tokens + progress.completion_tokens,
    )


def _finish_reason(worker_reason: str) -> str:
    return "length" if worker_reason == "length" else "stop"


async def _aclose(stream: AsyncIterator[GenerationChunk]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


@contextlib.asynccontextmanager
async def _closing(stream: AsyncIterator[GenerationChunk]) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await _aclose(stream)
