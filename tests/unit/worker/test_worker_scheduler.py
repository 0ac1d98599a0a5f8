"""The batch loop against a scripted engine (the scheduler's own logic, isolated)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tandem.engines.base import (
    EngineError,
    EngineStats,
    FinishReason,
    KvCapacityError,
    SamplingParams,
    StepOutput,
)
from tandem.worker.engine_runner import EngineRunner
from tandem.worker.errors import WorkerBusy, WorkerError
from tandem.worker.scheduler import DecodeBatcher, StepItem

SAMPLING = SamplingParams(max_tokens=3)


class ScriptedEngine:
    """``step`` emits 1, 2, 3 ... per sequence and finishes at max_tokens; ``fail_next``
    makes the next step raise instead."""

    def __init__(self) -> None:
        self.generated: dict[str, int] = {}
        self.batches: list[tuple[str, ...]] = []
        self.fail_next: list[Exception] = []

    def step(self, sampling: dict[str, SamplingParams]) -> list[StepOutput]:
        self.batches.append(tuple(sampling))
        if self.fail_next:
            raise self.fail_next.pop(0)
        outputs = []
        for rid, params in sampling.items():
            n = self.generated.get(rid, 0) + 1
            self.generated[rid] = n
            done = FinishReason.LENGTH if n >= params.max_tokens else None
            outputs.append(StepOutput(rid, n, done))
        return outputs

    def stats(self) -> EngineStats:
        return EngineStats(len(self.generated), 10, 10, 16)


@pytest.fixture
async def batcher() -> AsyncIterator[tuple[DecodeBatcher, ScriptedEngine]]:
    engine = ScriptedEngine()
    runner = EngineRunner(ThreadPoolExecutor(1), engine)  # type: ignore[arg-type]
    batcher = DecodeBatcher(runner)
    batcher.start()
    yield batcher, engine
    await batcher.stop()
    runner.shutdown()


async def drain(queue: asyncio.Queue[StepItem]) -> list[StepItem]:
    items: list[StepItem] = []
    async with asyncio.timeout(10):
        while True:
            item = await queue.get()
            items.append(item)
            if isinstance(item, WorkerError) or item.finish_reason is not None:
                return items


async def test_each_sequence_gets_its_own_tokens_until_it_finishes(
    batcher: tuple[DecodeBatcher, ScriptedEngine],
) -> None:
    loop, engine = batcher
    a = loop.add("a", SAMPLING)
    b = loop.add("b", SamplingParams(max_tokens=5))
    got_a, got_b = await drain(a), await drain(b)
    assert [o.token for o in got_a if isinstance(o, StepOutput)] == [1, 2, 3]
    assert [o.token for o in got_b if isinstance(o, StepOutput)] == [1, 2, 3, 4, 5]
    assert len(loop) == 0
    assert ("a", "b") in engine.batches  # they were stepped together


async def test_kv_exhaustion_fails_the_newest_and_keeps_the_rest(
    batcher: tuple[DecodeBatcher, ScriptedEngine],
) -> None:
    loop, engine = batcher
    engine.fail_next.append(KvCapacityError("no blocks"))
    old = loop.add("old", SAMPLING)
    new = loop.add("new", SAMPLING)
    got_new = await drain(new)
    got_old = await drain(old)
    assert isinstance(got_new[-1], WorkerBusy)
    assert [o.token for o in got_old if isinstance(o, StepOutput)] == [1, 2, 3]


async def test_engine_failure_fails_the_whole_batch(
    batcher: tuple[DecodeBatcher, ScriptedEngine],
) -> None:
    loop, engine = batcher
    engine.fail_next.append(EngineError("boom"))
    first, second = loop.add("x", SAMPLING), loop.add("y", SAMPLING)
    failed = [await drain(first), await drain(second)]
    assert all(isinstance(items[-1], WorkerError) for items in failed)
    assert "boom" in str(failed[0][-1])
    assert len(loop) == 0


async def test_a_removed_sequence_is_no_longer_stepped(
    batcher: tuple[DecodeBatcher, ScriptedEngine],
) -> None:
    loop, engine = batcher
    loop.add("left", SamplingParams(max_tokens=1_000_000))
    loop.remove("left")
    stay = loop.add("stay", SAMPLING)
    await drain(stay)
    last_batches = engine.batches[-2:]
    assert all("left" not in batch for batch in last_batches)
