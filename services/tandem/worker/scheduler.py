"""Continuous batching: one loop steps every decoding sequence together.

Each decode stream registers its request here and reads its tokens from its own
queue; the loop calls ``engine.step`` for all registered sequences at once (on the
engine thread), fans the outputs out, and drops a sequence when it finishes or its
stream leaves. Sequences join and leave between steps, never inside one.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass

from tandem.engines.base import EngineError, KvCapacityError, SamplingParams, StepOutput
from tandem.worker.engine_runner import EngineRunner
from tandem.worker.errors import WorkerBusy, WorkerError

logger = logging.getLogger(__name__)

StepItem = StepOutput | WorkerError


@dataclass(slots=True)
class _Entry:
    sampling: SamplingParams
    queue: asyncio.Queue[StepItem]
    order: int


class DecodeBatcher:
    def __init__(self, runner: EngineRunner) -> None:
        self._runner = runner
        self._entries: dict[str, _Entry] = {}
        self._wake = asyncio.Event()
        self._order = itertools.count()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="decode-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def add(self, request_id: str, sampling: SamplingParams) -> asyncio.Queue[StepItem]:
        """Start stepping ``request_id`` (committed/prefilled in the engine)."""
        queue: asyncio.Queue[StepItem] = asyncio.Queue()
        self._entries[request_id] = _Entry(sampling, queue, next(self._order))
        self._wake.set()
        return queue

    def remove(self, request_id: str) -> None:
        """Stop stepping ``request_id`` (idempotent); an in-flight step's token is dropped."""
        self._entries.pop(request_id, None)

    def __len__(self) -> int:
        return len(self._entries)

    async def _run(self) -> None:
        while True:
            if not self._entries:
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = {rid: entry.sampling for rid, entry in self._entries.items()}
            try:
                outputs = await self._runner.call(self._runner.engine.step, batch)
            except KvCapacityError as exc:
                self._evict_newest(batch, exc)
                continue
            except EngineError as exc:
                self._fail_all(batch, exc)
                continue
            self._fan_out(outputs)

    def _fan_out(self, outputs: list[StepOutput]) -> None:
        for output in outputs:
            entry = self._entries.get(output.request_id)
            if entry is None:  # the stream left while the step ran
                continue
            entry.queue.put_nowait(output)
            if output.finish_reason is not None:
                del self._entries[output.request_id]

    def _evict_newest(self, batch: dict[str, SamplingParams], exc: KvCapacityError) -> None:
        """The KV pool cannot grow every sequence: fail the youngest, keep the rest."""
        present = [rid for rid in batch if rid in self._entries]
        if not present:
            return
        victim = max(present, key=lambda rid: self._entries[rid].order)
        logger.warning("KV pool full while decoding; failing request %s: %s", victim, exc)
        entry = self._entries.pop(victim)
        entry.queue.put_nowait(WorkerBusy(f"KV cache exhausted while decoding: {exc}"))

    def _fail_all(self, batch: dict[str, SamplingParams], exc: EngineError) -> None:
        logger.error("engine step failed for %d sequences: %s", len(batch), exc)
        for rid in batch:
            entry = self._entries.pop(rid, None)
            if entry is not None:
                entry.queue.put_nowait(WorkerError(f"decode step failed: {exc}"))
