"""The engine loop: one ``engine.step`` after another, each over everything running.

Decode streams register their request here and read tokens from their own queue;
prefills are queued in the engine (``start_prefill``) and awaited here. Each iteration
calls ``engine.step`` (on the engine thread) with every decoding sequence; the engine
adds the next chunk of each queued prefill under its per-step token budget, so a long
prompt advances between decode steps instead of stalling them. Outputs are fanned out
to their streams, and a finished prefill resolves its waiter. Sequences join and leave
between steps, never inside one.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from tandem.engines.base import (
    EngineError,
    EngineLost,
    GathersKv,
    KvCapacityError,
    PrefillResult,
    SamplingParams,
    StepOutput,
)
from tandem.worker.engine_runner import EngineRunner
from tandem.worker.errors import WorkerBusy, WorkerError

logger = logging.getLogger(__name__)

StepItem = StepOutput | WorkerError


@dataclass(slots=True)
class _Entry:
    sampling: SamplingParams
    queue: asyncio.Queue[StepItem]
    order: int


class EngineLoop:
    def __init__(
        self, runner: EngineRunner, on_lost: Callable[[EngineLost], None] = lambda _: None
    ) -> None:
        """``on_lost``: the engine can serve nothing more; the loop has failed everything
        it held, and stops."""
        self._runner = runner
        self._on_lost = on_lost
        self._entries: dict[str, _Entry] = {}
        self._prefills: dict[str, asyncio.Future[PrefillResult]] = {}
        self._wake = asyncio.Event()
        self._order = itertools.count()
        self._task: asyncio.Task[None] | None = None
        self._lost = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="engine-loop")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for future in self._prefills.values():
            future.cancel()
        self._prefills.clear()

    async def prefill(
        self, request_id: str, prompt: Sequence[int], sampling: SamplingParams
    ) -> PrefillResult:
        """Queue a prefill in the engine and wait for the step that finishes it. Engine
        refusals (KvCapacityError, EngineError) raise as they are. A caller that goes
        away releases the request (its queued chunks are dropped)."""
        if self._lost:
            raise WorkerError("the worker's engine is lost")
        engine = self._runner.engine
        future: asyncio.Future[PrefillResult] = asyncio.get_running_loop().create_future()
        # Waiting before the engine queues it: a step may finish a short prompt before
        # this coroutine resumes.
        self._prefills[request_id] = future
        try:
            await self._runner.call(
                engine.start_prefill,
                request_id,
                prompt,
                sampling,
                on_abandon=lambda _: engine.release(request_id),
            )
        except BaseException:
            self._prefills.pop(request_id, None)
            raise
        self._wake.set()
        try:
            return await future
        except asyncio.CancelledError:
            if self._prefills.pop(request_id, None) is not None:
                self._runner.call_soon(engine.release, request_id)
            raise

    async def gather_kv(self, request_id: str) -> None:
        """Gather a prefilled sequence's KV from the engine's ranks (``GathersKv``), on
        the engine thread between steps. A lost rank fails everything, as in a step."""
        engine = self._runner.engine
        assert isinstance(engine, GathersKv), "only engines whose KV is split gather it"
        try:
            await self._runner.call(engine.gather_kv, request_id)
        except EngineLost as exc:
            self._lose(exc)
            raise WorkerError(f"the worker's engine is lost: {exc}") from exc

    def add(self, request_id: str, sampling: SamplingParams) -> asyncio.Queue[StepItem]:
        """Start stepping ``request_id`` (committed/prefilled in the engine)."""
        queue: asyncio.Queue[StepItem] = asyncio.Queue()
        if self._lost:
            queue.put_nowait(WorkerError("the worker's engine is lost"))
            return queue
        self._entries[request_id] = _Entry(sampling, queue, next(self._order))
        self._wake.set()
        return queue

    def remove(self, request_id: str) -> None:
        """Stop stepping ``request_id`` (idempotent); an in-flight step's token is dropped."""
        self._entries.pop(request_id, None)

    def __len__(self) -> int:
        """Sequences decoding."""
        return len(self._entries)

    async def _run(self) -> None:
        while not self._lost:
            if not self._entries and not self._prefills:
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = {rid: entry.sampling for rid, entry in self._entries.items()}
            try:
                outputs = await self._runner.call(self._runner.engine.step, batch)
            except EngineLost as exc:
                self._lose(exc)
                return
            except KvCapacityError as exc:
                if batch:
                    self._evict_newest(batch, exc)
                else:  # queued prefills hold reservations: should not happen
                    self._fail_prefills(WorkerBusy(f"KV cache exhausted while prefilling: {exc}"))
                continue
            except EngineError as exc:
                logger.error("engine step failed (%d decoding): %s", len(batch), exc)
                self._fail_decodes(batch, WorkerError(f"decode step failed: {exc}"))
                self._fail_prefills(WorkerError(f"prefill step failed: {exc}"))
                continue
            self._fan_out(outputs)

    def _lose(self, exc: EngineLost) -> None:
        """Fail everything held, once; the loop stops at its next turn."""
        if self._lost:
            return
        self._lost = True
        logger.error("engine lost (%d decoding): %s", len(self._entries), exc)
        error = WorkerError(f"the worker's engine is lost: {exc}")
        self._fail_decodes(list(self._entries), error)
        self._fail_prefills(error)
        self._on_lost(exc)

    def _fan_out(self, outputs: list[StepOutput]) -> None:
        for output in outputs:
            if output.prefill is not None:
                self._resolve_prefill(output.request_id, output.prefill)
                continue
            entry = self._entries.get(output.request_id)
            if entry is None:  # the stream left while the step ran
                continue
            entry.queue.put_nowait(output)
            if output.finish_reason is not None:
                del self._entries[output.request_id]

    def _resolve_prefill(self, request_id: str, result: PrefillResult) -> None:
        future = self._prefills.pop(request_id, None)
        if future is not None and not future.done():
            future.set_result(result)
        # else its caller left, and queued the release

    def _evict_newest(self, batch: dict[str, SamplingParams], exc: KvCapacityError) -> None:
        """The KV pool cannot grow every sequence: fail the youngest, keep the rest."""
        present = [rid for rid in batch if rid in self._entries]
        if not present:
            return
        victim = max(present, key=lambda rid: self._entries[rid].order)
        logger.warning("KV pool full while decoding; failing request %s: %s", victim, exc)
        entry = self._entries.pop(victim)
        entry.queue.put_nowait(WorkerBusy(f"KV cache exhausted while decoding: {exc}"))

    def _fail_decodes(self, request_ids: Iterable[str], error: WorkerError) -> None:
        for rid in request_ids:
            entry = self._entries.pop(rid, None)
            if entry is not None:
                entry.queue.put_nowait(error)

    def _fail_prefills(self, error: WorkerError) -> None:
        failed, self._prefills = self._prefills, {}
        for rid, future in failed.items():
            if not future.done():
                future.set_exception(error)
            self._runner.call_soon(self._runner.engine.release, rid)
