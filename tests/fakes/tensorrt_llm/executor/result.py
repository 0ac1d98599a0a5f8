"""Mirrors tensorrt_llm/executor/result.py (v1.2.1): CompletionOutput, GenerationResult,
IterationResult.

Real semantics kept: ``generate_async`` returns a ``GenerationResult`` at once;
``await result`` / ``await result.aresult()`` waits for the end; ``async for _ in result``
yields the *same* object after each update (streaming); ``outputs[0].token_ids`` holds
all tokens generated so far; ``finished`` turns true with the last update; ``abort()``
asks the executor to cancel, which then finishes the request with
``finish_reason == "cancelled"``; a failed request raises ``RequestError`` from the
await/iteration.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from tensorrt_llm.disaggregated_params import DisaggregatedParams
from tensorrt_llm.executor.utils import RequestError

if TYPE_CHECKING:
    from collections.abc import Callable

FinishReason = Literal["stop", "length", "timeout", "cancelled"]


@dataclass(slots=True)
class CompletionOutput:
    """Mirrors executor/result.py ``CompletionOutput`` (the fields Tandem reads)."""

    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    stop_reason: int | str | None = None
    disaggregated_params: DisaggregatedParams | None = None


@dataclass(frozen=True, slots=True)
class _Update:
    new_tokens: tuple[int, ...]
    finished: bool
    finish_reason: FinishReason | None = None
    disaggregated_params: DisaggregatedParams | None = None
    error: str | None = None


class GenerationResult:
    """Mirrors executor/result.py ``GenerationResult`` / llmapi ``RequestOutput``."""

    def __init__(
        self,
        request_id: int,
        prompt_token_ids: list[int],
        *,
        streaming: bool,
        on_abort: Callable[[int], None],
    ) -> None:
        self.request_id = request_id
        self.prompt = None
        self.prompt_token_ids = prompt_token_ids
        self.outputs = [CompletionOutput(index=0)]
        self._streaming = streaming
        self._done = False
        self._updates: asyncio.Queue[_Update] = asyncio.Queue()
        self._on_abort = on_abort
        self.aborted = False

    @property
    def finished(self) -> bool:
        return self._done

    def abort(self) -> None:
        """Mirrors ``GenerationResultBase.abort``: asks the executor to cancel."""
        if not self.aborted and not self._done:
            self.aborted = True
            self._on_abort(self.request_id)

    # Called by the fake executor ------------------------------------------------------

    def _push(self, update: _Update) -> None:
        self._updates.put_nowait(update)

    # Consumer side ----------------------------------------------------------------------

    async def _aresult_step(self) -> None:
        update = await self._updates.get()
        if update.error is not None:
            self._done = True
            raise RequestError(update.error)
        output = self.outputs[0]
        output.token_ids.extend(update.new_tokens)
        if update.disaggregated_params is not None:
            output.disaggregated_params = update.disaggregated_params
        if update.finished:
            output.finish_reason = update.finish_reason
            self._done = True

    async def aresult(self) -> GenerationResult:
        while not self._done:
            await self._aresult_step()
        return self

    def __await__(self) -> Generator[object, None, GenerationResult]:
        return self.aresult().__await__()

    def __aiter__(self) -> GenerationResult:
        return self

    async def __anext__(self) -> GenerationResult:
        if self._done:
            raise StopAsyncIteration
        await self._aresult_step()
        return self


class IterationResult:
    """Mirrors executor/result.py ``IterationResult``: async iteration over the stats
    collected so far; each item is one iteration's stats dict; an empty queue ends the
    iteration after ``timeout`` seconds."""

    def __init__(self, items: list[dict[str, object]], timeout: float | None) -> None:
        self._items = items
        self._timeout = timeout

    def __aiter__(self) -> IterationResult:
        return self

    async def __anext__(self) -> dict[str, object]:
        if not self._items:
            await asyncio.sleep(min(self._timeout or 0.0, 0.01))
            if not self._items:
                raise StopAsyncIteration
        return self._items.pop(0)
