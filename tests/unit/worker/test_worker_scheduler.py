"""The engine loop against a scripted engine (the loop's own logic, isolated)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from tandem.engines.base import (
    EngineError,
    EngineLost,
    EngineStats,
    FinishReason,
    KvCapacityError,
    KvLayout,
    PrefillResult,
    SamplingParams,
    StepOutput,
)
from tandem.worker.engine_runner import EngineRunner
from tandem.worker.errors import WorkerBusy, WorkerError
from tandem.worker.scheduler import EngineLoop, StepItem

SAMPLING = SamplingParams(max_tokens=3)


class ScriptedEngine:
    """``step`` emits 1, 2, 3 ... per decoding sequence and finishes at max_tokens; a
    queued prefill of n tokens finishes on its ceil(n / 4)-th step (first token 100);
    ``fail_next`` makes the next step raise instead, ``fail_gather`` every gather."""

    def __init__(self) -> None:
        self.generated: dict[str, int] = {}
        self.prefilling: dict[str, int] = {}  # request -> prompt tokens left
        self.batches: list[tuple[str, ...]] = []  # decoding ids per step
        self.prefill_steps: list[tuple[str, ...]] = []  # prefilling ids per step
        self.released: list[str] = []
        self.gathered: list[str] = []
        self.fail_gather: Exception | None = None
        self.fail_next: list[Exception] = []
        self.refuse_prefill: Exception | None = None
        self.started = threading.Event()  # a prefill was queued
        self.released_one = threading.Event()

    def start_prefill(self, request_id: str, prompt: Sequence[int], _: SamplingParams) -> None:
        if self.refuse_prefill is not None:
            raise self.refuse_prefill
        self.prefilling[request_id] = len(prompt)
        self.started.set()

    def step(self, sampling: dict[str, SamplingParams]) -> list[StepOutput]:
        self.batches.append(tuple(sampling))
        self.prefill_steps.append(tuple(self.prefilling))
        if self.fail_next:
            raise self.fail_next.pop(0)
        outputs = []
        for rid, params in sampling.items():
            n = self.generated.get(rid, 0) + 1
            self.generated[rid] = n
            done = FinishReason.LENGTH if n >= params.max_tokens else None
            outputs.append(StepOutput(rid, n, done))
        for rid in list(self.prefilling):
            self.prefilling[rid] -= 4
            if self.prefilling[rid] <= 0:
                del self.prefilling[rid]
                result = PrefillResult(100, 0, KvLayout(0, ()))
                outputs.append(StepOutput(rid, 100, None, prefill=result))
        return outputs

    def gather_kv(self, request_id: str) -> None:  # a tensor-parallel engine's handoff
        if self.fail_gather is not None:
            raise self.fail_gather
        self.gathered.append(request_id)

    def release(self, request_id: str) -> None:
        self.prefilling.pop(request_id, None)
        self.released.append(request_id)
        self.released_one.set()

    def stats(self) -> EngineStats:
        return EngineStats(len(self.generated), 10, 10, 16)


@pytest.fixture
async def loop() -> AsyncIterator[tuple[EngineLoop, ScriptedEngine]]:
    engine = ScriptedEngine()
    runner = EngineRunner(ThreadPoolExecutor(1), engine)  # type: ignore[arg-type]
    engine_loop = EngineLoop(runner)
    engine_loop.start()
    yield engine_loop, engine
    await engine_loop.stop()
    runner.shutdown()


async def drain(queue: asyncio.Queue[StepItem]) -> list[StepItem]:
    items: list[StepItem] = []
    async with asyncio.timeout(10):
        while True:
            item = await queue.get()
            items.append(item)
            if isinstance(item, WorkerError) or item.finish_reason is not None:
                return items


def tokens(items: list[StepItem]) -> list[int]:
    return [o.token for o in items if isinstance(o, StepOutput)]


async def test_each_sequence_gets_its_own_tokens_until_it_finishes(
    loop: tuple[EngineLoop, ScriptedEngine],
) -> None:
    engine_loop, engine = loop
    a = engine_loop.add("a", SAMPLING)
    b = engine_loop.add("b", SamplingParams(max_tokens=5))
    got_a, got_b = await drain(a), await drain(b)
    assert tokens(got_a) == [1, 2, 3]
    assert tokens(got_b) == [1, 2, 3, 4, 5]
    assert len(engine_loop) == 0
    assert ("a", "b") in engine.batches  # they were stepped together


async def test_a_long_prefill_runs_between_decode_steps(
    loop: tuple[EngineLoop, ScriptedEngine],
) -> None:
    """A 40-token prompt needs 10 steps; the decode stream gets a token from each of
    them instead of waiting for the whole prefill."""
    engine_loop, engine = loop
    stream = engine_loop.add("decoding", SamplingParams(max_tokens=1000))
    await stream.get()
    result = await asyncio.wait_for(engine_loop.prefill("long", [1] * 40, SAMPLING), 10)
    assert result.first_token == 100
    shared = [i for i, ids in enumerate(engine.prefill_steps) if "long" in ids]
    assert len(shared) == 10
    assert all(engine.batches[i] == ("decoding",) for i in shared)
    engine_loop.remove("decoding")


async def test_a_prefill_finishing_in_its_first_step_resolves(
    loop: tuple[EngineLoop, ScriptedEngine],
) -> None:
    engine_loop, _ = loop
    for index in range(20):
        result = await asyncio.wait_for(engine_loop.prefill(f"p{index}", [1], SAMPLING), 10)
        assert result.first_token == 100


async def test_a_refused_prefill_raises_and_leaves_nothing_queued(
    loop: tuple[EngineLoop, ScriptedEngine],
) -> None:
    engine_loop, engine = loop
    engine.refuse_prefill = KvCapacityError("pool full")
    with pytest.raises(KvCapacityError, match="pool full"):
        await engine_loop.prefill("p", [1] * 8, SAMPLING)
    engine.refuse_prefill = None
    assert (await asyncio.wait_for(engine_loop.prefill("q", [1], SAMPLING), 10)).first_token == 100


async def test_a_prefill_whose_caller_left_is_released(
    loop: tuple[EngineLoop, ScriptedEngine],
) -> None:
    engine_loop, engine = loop
    waiter = asyncio.ensure_future(engine_loop.prefill("gone", [1] * 4000, SAMPLING))
    assert await asyncio.to_thread(engine.started.wait, 10)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert await asyncio.to_thread(engine.released_one.wait, 10)
    assert engine.released == ["gone"]
    assert "gone" not in engine.prefilling


async def test_kv_exhaustion_fails_the_newest_and_keeps_the_rest(
    loop: tuple[EngineLoop, ScriptedEngine],
) -> None:
    engine_loop, engine = loop
    engine.fail_next.append(KvCapacityError("no blocks"))
    old = engine_loop.add("old", SAMPLING)
    new = engine_loop.add("new", SAMPLING)
    got_new = await drain(new)
    got_old = await drain(old)
    assert isinstance(got_new[-1], WorkerBusy)
    assert tokens(got_old) == [1, 2, 3]


async def test_engine_failure_fails_decodes_and_prefills(
    loop: tuple[EngineLoop, ScriptedEngine],
) -> None:
    engine_loop, engine = loop
    engine.fail_next.append(EngineError("boom"))
    first, second = engine_loop.add("x", SAMPLING), engine_loop.add("y", SAMPLING)
    prefill = asyncio.ensure_future(engine_loop.prefill("z", [1] * 400, SAMPLING))
    failed = [await drain(first), await drain(second)]
    assert all(isinstance(items[-1], WorkerError) for items in failed)
    assert "boom" in str(failed[0][-1])
    with pytest.raises(WorkerError, match="boom"):
        await asyncio.wait_for(prefill, 10)
    assert len(engine_loop) == 0


async def test_a_lost_engine_fails_everything_says_so_once_and_steps_no_more() -> None:
    engine = ScriptedEngine()
    runner = EngineRunner(ThreadPoolExecutor(1), engine)  # type: ignore[arg-type]
    heard: list[EngineLost] = []
    engine_loop = EngineLoop(runner, heard.append)
    engine.fail_next.append(EngineLost("rank 1 gone"))
    engine_loop.start()
    try:
        first = engine_loop.add("x", SAMPLING)
        prefill = asyncio.ensure_future(engine_loop.prefill("z", [1] * 400, SAMPLING))
        (failed,) = await drain(first)
        assert isinstance(failed, WorkerError) and "engine is lost: rank 1 gone" in str(failed)
        with pytest.raises(WorkerError, match="engine is lost"):
            await asyncio.wait_for(prefill, 10)
        assert [str(e) for e in heard] == ["rank 1 gone"]
        steps = len(engine.batches)
        later = engine_loop.add("later", SAMPLING)  # the loop is done
        assert isinstance(later.get_nowait(), WorkerError)
        await asyncio.sleep(0.1)
        assert len(engine.batches) == steps
    finally:
        await engine_loop.stop()
        runner.shutdown()


async def test_a_rank_lost_in_a_gather_fails_everything_as_in_a_step() -> None:
    engine = ScriptedEngine()
    runner = EngineRunner(ThreadPoolExecutor(1), engine)  # type: ignore[arg-type]
    heard: list[EngineLost] = []
    engine_loop = EngineLoop(runner, heard.append)
    engine_loop.start()
    try:
        await engine_loop.prefill("p", [1] * 4, SAMPLING)
        await engine_loop.gather_kv("p")
        assert engine.gathered == ["p"]
        decoding = engine_loop.add("x", SamplingParams(max_tokens=1_000_000))
        engine.fail_gather = EngineLost("rank 1 gone")
        with pytest.raises(WorkerError, match="engine is lost: rank 1 gone"):
            await engine_loop.gather_kv("q")
        failed = (await drain(decoding))[-1]
        assert isinstance(failed, WorkerError) and "engine is lost" in str(failed)
        assert [str(e) for e in heard] == ["rank 1 gone"]
        with pytest.raises(WorkerError, match="engine is lost"):
            await engine_loop.prefill("after", [1] * 4, SAMPLING)
        steps = len(engine.batches)
        await asyncio.sleep(0.1)
        assert len(engine.batches) <= steps + 1  # at most the step already under way
    finally:
        await engine_loop.stop()
        runner.shutdown()


async def test_a_removed_sequence_is_no_longer_stepped(
    loop: tuple[EngineLoop, ScriptedEngine],
) -> None:
    engine_loop, engine = loop
    engine_loop.add("left", SamplingParams(max_tokens=1_000_000))
    engine_loop.remove("left")
    stay = engine_loop.add("stay", SAMPLING)
    await drain(stay)
    last_batches = engine.batches[-2:]
    assert all("left" not in batch for batch in last_batches)
