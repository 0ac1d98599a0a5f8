"""Work queue semantics: coalescing, no concurrent processing of a key, backoff."""

from __future__ import annotations

import asyncio

from tandem_operator.kube.workqueue import WorkQueue


async def test_adds_of_a_queued_key_coalesce() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for key in ("a", "b", "a", "a"):
        queue.add(key)
    assert len(queue) == 2
    assert [await queue.get(), await queue.get()] == ["a", "b"]


async def test_a_key_added_while_processing_is_requeued_once_done() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    key = await queue.get()
    queue.add("a")
    queue.add("a")
    assert len(queue) == 0  # never handed to a second worker while in flight
    queue.done(key)
    assert len(queue) == 1
    assert await queue.get() == "a"
    queue.done("a")
    assert len(queue) == 0


async def test_add_after_delays_and_keeps_the_earliest_timer() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", 0.05)
    queue.add_after("a", 10)  # later: ignored, the earlier timer stands
    assert len(queue) == 0
    assert await asyncio.wait_for(queue.get(), timeout=5) == "a"
    queue.close()


async def test_rate_limited_adds_back_off_exponentially_until_forgotten() -> None:
    queue: WorkQueue[str] = WorkQueue(base_delay=0.5, max_delay=3)
    delays = [queue.add_rate_limited("a") for _ in range(5)]
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert queue.failures("a") == 5
    queue.forget("a")
    assert queue.add_rate_limited("a") == 0.5
    queue.close()
