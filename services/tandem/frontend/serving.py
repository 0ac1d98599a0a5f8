"""OpenAI endpoint logic: validate, tokenize, route, assemble responses or SSE chunks.

Each public method returns either a complete response model or an async iterator of
SSE ``data:`` lines, and raises ``TandemError`` for anything a client should see. A
stream is only returned once its first token exists, so admission, routing and
prefill failures still reach the client as proper HTTP statuses; failures after that
end the stream with an OpenAI error event.

Closing a returned stream early (client gone) closes the router's generator, which
cancels the worker call and releases the request's KV on both sides.

Tokenizing never runs on the event loop: a 32k-token prompt takes ~40-60 ms of CPU, which
would stall every other request's stream. Encoding (and detokenizing a large chunk) runs
on ``executor``; ``tokenizers`` and openai-harmony release the GIL while they work.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import ParamSpec, Protocol, TypeVar

from opentelemetry import trace

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
from tandem.frontend.tenancy import TenantGate
from tandem.router.messages import GenerationChunk, GenerationRequest, RouteInfo
from tandem.router.policy import PrefillPath
from tandem.telemetry.tracing import TRACER
from tandem.tokenization import ChatMessage, TokenizationError, Tokenizer
from tandem.tokenization.chat_output import PlainChatOutput
from tandem.tokenization.protocol import ChatDelta, ChatOutputParser

logger = logging.getLogger(__name__)

SSE_DONE = "data: [DONE]\n\n"
# Chunks with fewer ids are detokenized inline: a thread hop costs more than the work.
OFFLOAD_DETOKENIZE_TOKENS = 64

P = ParamSpec("P")
R = TypeVar("R")


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
        executor: Executor | None = None,
        gate: TenantGate | None = None,
    ) -> None:
        """``executor`` runs tokenizer work (None: the event loop's default pool).
        ``gate``: per-tenant limits and fair queuing in front of ``generator``
        (``tandem.frontend.tenancy``); None sends every request straight on."""
        self.config = config
        self._tokenizer = tokenizer
        self._executor = executor
        self._generator = generator
        self._gate = gate
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
        self._refuse_early(ctx)
        try:
            prompt, tokenize_seconds = await self._tokenize(
                self._tokenizer.apply_chat_template, messages, add_generation_prompt=True
            )
        except TokenizationError as exc:
            raise InvalidRequestError(str(exc), param="messages") from None
        max_tokens = request.max_completion_tokens or request.max_tokens
        param = "max_completion_tokens" if request.max_completion_tokens else "max_tokens"
        prepared = prepare_request(
            request, ctx, prompt, max_tokens, param, "messages", self.config, self._stops
        )
        stream, first = await self._start(prepared, tokenize_seconds)
        if request.stream:
            return self._chat_sse(prepared, stream, first)
        reply, progress = await self._collect(
            prepared, stream, first, self._tokenizer.chat_output()
        )
        return ChatCompletionResponse(
            id=f"chatcmpl-{ctx.request_id}",
            created=int(self._wall_clock()),
            model=prepared.model,
            choices=[
                ChatChoice(
                    message=ChatMessageOut(
                        content=reply.content, reasoning_content=reply.reasoning or None
                    ),
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
        self._refuse_early(ctx)
        prompt, tokenize_seconds = await self._tokenize(
            completion_prompt, request.prompt, self._tokenizer
        )
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
        stream, first = await self._start(prepared, tokenize_seconds)
        if request.stream:
            return self._completion_sse(prepared, stream, first)
        reply, progress = await self._collect(prepared, stream, first, self._plain_output())
        return CompletionResponse(
            id=f"cmpl-{ctx.request_id}",
            created=int(self._wall_clock()),
            model=prepared.model,
            choices=[
                CompletionChoice(
                    text=reply.content,
                    finish_reason=progress.finish_reason,
                    token_ids=progress.token_ids,
                )
            ],
            usage=_usage(progress),
        )

    # ------------------------------------------------------------------ tokenizer work

    def _refuse_early(self, ctx: RequestContext) -> None:
        """A request its tenant's limits or a full queue refuse whatever the prompt is
        refused before the prompt is tokenized: under overload, that CPU is what the
        requests that do get through need."""
        if self._gate is not None:
            self._gate.refuse_early(ctx.tenant)

    async def _off_loop(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def _tokenize(
        self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs
    ) -> tuple[R, float]:
        """``fn`` off the loop, and how long it took (a TTFT phase)."""
        started = self._clock()
        with TRACER.start_as_current_span("frontend.tokenize"):
            result = await self._off_loop(fn, *args, **kwargs)
        return result, self._clock() - started

    def _plain_output(self) -> PlainChatOutput:
        return PlainChatOutput(self._tokenizer.detokenizer())

    async def _parse(
        self, output: ChatOutputParser, token_ids: tuple[int, ...], final: bool
    ) -> ChatDelta:
        if len(token_ids) < OFFLOAD_DETOKENIZE_TOKENS:
            delta = output.push_many(token_ids)
        else:
            delta = await self._off_loop(output.push_many, token_ids)
        return delta + output.finish() if final else delta

    # ------------------------------------------------------------------ generation

    async def _start(
        self, prepared: PreparedRequest, tokenize_seconds: float
    ) -> tuple[AsyncIterator[GenerationChunk], GenerationChunk]:
        """Route the request and wait for its first token (errors raise here)."""
        request = GenerationRequest(prepared.ctx.request_id, prepared.prompt, prepared.sampling)
        stream: AsyncIterator[GenerationChunk]
        if self._gate is not None:
            stream = self._gate.generate(prepared.ctx.tenant, request)
        else:
            stream = self._generator.generate(request)
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
        self._observe_phases(first.route, tokenize_seconds)
        self._metrics.prompt_tokens.inc(len(prepared.prompt))
        self._metrics.prompt_length.observe(len(prepared.prompt))
        return stream, first

    def _observe_phases(self, route: RouteInfo | None, tokenize_seconds: float) -> None:
        """The TTFT breakdown, as histograms and on the request's span."""
        phases = {"tokenize": tokenize_seconds}
        path = "local"
        if route is not None:
            path = route.path.value
            phases |= {
                "queue": route.queue_seconds,
                "route": route.route_seconds,
                "first_token": route.first_token_seconds,
            }
            if route.path is PrefillPath.REMOTE:
                phases |= {"prefill": route.prefill_seconds, "kv_transfer": route.kv_seconds}
            trace.get_current_span().set_attributes(
                {
                    "tandem.route.path": path,
                    "tandem.route.reason": route.reason.value,
                    "tandem.route.decode_worker": route.decode_worker,
                    "tandem.route.prefill_worker": route.prefill_worker or "",
                }
            )
        for phase, seconds in phases.items():
            self._metrics.ttft_phase_seconds.labels(phase, path).observe(seconds)

    async def _deltas(
        self,
        prepared: PreparedRequest,
        stream: AsyncIterator[GenerationChunk],
        first: GenerationChunk,
        progress: _Progress,
        output: ChatOutputParser,
    ) -> AsyncGenerator[ChatDelta, None]:
        """Text in order (answer and reasoning); sets ``progress`` as it goes. Closes
        ``stream``. Stop strings apply to the answer."""
        matcher = StopStringMatcher(prepared.stops)
        progress.route = first.route
        chunk = first
        last = started = self._clock()
        later_tokens = 0  # tokens after the first chunk: the request's mean ITL's divisor
        try:
            while True:
                count = len(chunk.token_ids)
                progress.completion_tokens += count
                if progress.token_ids is not None:
                    progress.token_ids.extend(chunk.token_ids)
                self._metrics.generation_tokens.inc(count)
                delta = await self._parse(output, chunk.token_ids, chunk.finish_reason is not None)
                out, stopped = matcher.feed(delta.content)
                if out or delta.reasoning:
                    yield ChatDelta(content=out, reasoning=delta.reasoning)
                if stopped:
                    progress.finish_reason = "stop"
                    return
                if chunk.finish_reason is not None:
                    tail, stopped = matcher.flush()
                    if tail:
                        yield ChatDelta(content=tail)
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
                    later_tokens += len(chunk.token_ids)
                last = now
        finally:
            self._metrics.answer_length.observe(progress.completion_tokens)
            if later_tokens:
                self._metrics.request_itl_seconds.observe((last - started) / later_tokens)
            await _aclose(stream)

    async def _collect(
        self,
        prepared: PreparedRequest,
        stream: AsyncIterator[GenerationChunk],
        first: GenerationChunk,
        output: ChatOutputParser,
    ) -> tuple[ChatDelta, _Progress]:
        progress = _Progress(prompt_tokens=len(prepared.prompt))
        if prepared.return_token_ids:
            progress.token_ids = []
        reply = ChatDelta()
        try:
            async for delta in self._deltas(prepared, stream, first, progress, output):
                reply += delta
        finally:
            await _aclose(stream)
        return reply, progress

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
        deltas = self._deltas(prepared, stream, first, progress, self._tokenizer.chat_output())
        # Events ready at the same moment leave in one write (the role event with the
        # first text, the final event with usage and [DONE]); clients see the same SSE.
        pending = event([ChatChunkChoice(delta=DeltaMessage(role="assistant", content=""))])
        # Closing both covers a client that leaves before ``deltas`` ever started.
        async with contextlib.aclosing(deltas), _closing(stream):
            try:
                async for piece in deltas:
                    delta = DeltaMessage(
                        content=piece.content or None, reasoning_content=piece.reasoning or None
                    )
                    yield pending + event([ChatChunkChoice(delta=delta)])
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
        deltas = self._deltas(prepared, stream, first, progress, self._plain_output())
        async with contextlib.aclosing(deltas), _closing(stream):
            try:
                async for piece in deltas:
                    if piece.content:
                        yield event([CompletionChoice(text=piece.content, finish_reason=None)])
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
