"""The router's I/O shell against in-process workers: retries, fallbacks, admission,
cancellation and health, observed through results, worker counters and metrics."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tandem.engines.base import SamplingParams
from tandem.router.errors import GenerationFailedError, NoWorkerAvailableError, OverloadedError
from tandem.router.membership import Member, StaticMembership
from tandem.router.messages import GenerationChunk, GenerationRequest, RouterConfig
from tandem.router.metrics import RouterMetrics
from tandem.router.policy import DecisionReason, PolicyConfig, PrefillPath, WorkerRole
from tandem.router.ports import PrefillReply, WorkerErrorKind
from tandem.router.service import Router
from tandem_dev.doubles.inprocess import InProcessCluster, InProcessWorker, KvLedger, fake_token

P, D = WorkerRole.PREFILL, WorkerRole.DECODE
LONG, SHORT = 600, 50


class Fixture:
    def __init__(
        self,
        roles: dict[str, WorkerRole],
        clock: Callable[[], float] = time.monotonic,
        **config: object,
    ) -> None:
        self.ledger = KvLedger()
        self.workers = {a: InProcessWorker(a, r, self.ledger) for a, r in roles.items()}
        self.registry = CollectorRegistry()
        base = {"policy": PolicyConfig(min_prefill_tokens=100), "health_interval_seconds": 3600.0}
        self.router = Router(
            StaticMembership([Member(a, r) for a, r in roles.items()]),
            InProcessCluster(list(self.workers.values())),
            RouterMetrics(self.registry),
            RouterConfig(**{**base, **config}),  # type: ignore[arg-type]
            clock=clock,
        )

    def metric(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0


@contextlib.asynccontextmanager
async def running(fx: Fixture) -> AsyncIterator[Router]:
    async with fx.router.running() as router:
        yield router


def request(n: int, max_tokens: int = 4, rid: str = "r1") -> GenerationRequest:
    prompt = [(i * 7) % 256 for i in range(n)]
    return GenerationRequest(rid, prompt, SamplingParams(max_tokens=max_tokens, seed=3))


async def collect(router: Router, req: GenerationRequest) -> list[GenerationChunk]:
    return [chunk async for chunk in router.generate(req)]


def tokens(chunks: list[GenerationChunk]) -> list[int]:
    return [t for c in chunks for t in c.token_ids]


def expected(req: GenerationRequest) -> list[int]:
    return [fake_token(req.prompt, i, 3) for i in range(req.sampling.max_tokens)]


async def eventually(check: Callable[[], bool], within: float = 5.0) -> None:
    """Poll ``check`` until it holds; fails the test after ``within`` seconds."""
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110 - polling state owned by fakes
            await asyncio.sleep(0.01)


async def test_long_prompts_go_remote_short_ones_local_with_equal_tokens() -> None:
    fx = Fixture({"p1": P, "d1": D})
    async with running(fx) as router:
        remote = await collect(router, request(LONG))
        local = await collect(router, request(SHORT))
    first = remote[0].route
    assert first is not None and first.path is PrefillPath.REMOTE and first.prefill_worker == "p1"
    assert local[0].route is not None and local[0].route.path is PrefillPath.LOCAL
    assert tokens(remote) == expected(request(LONG))
    assert tokens(local) == expected(request(SHORT))
    assert remote[-1].finish_reason == "length"
    assert (
        fx.metric("tandem_router_prefill_decisions_total", path="remote", reason="long_prompt") == 1
    )
    assert (
        fx.metric("tandem_router_prefill_decisions_total", path="local", reason="short_prompt") == 1
    )
    assert fx.metric("tandem_router_kv_transfer_bytes_total") == LONG * 64
    assert fx.ledger.parked == {}


async def test_the_router_measures_each_prefill_workers_rate_queue_included() -> None:
    # p1 prefills one prompt at a time, each taking 1 s of the router's clock: a worker
    # doing 600 tokens/s. r2 waits behind r1, so its 2 s must count r1's tokens too.
    now = [0.0]
    fx = Fixture({"p1": P, "d1": D}, clock=lambda: now[0])
    p1 = fx.workers["p1"]
    p1.prefill_delay = 0.05  # long enough for r2 to arrive while r1 is in flight
    prefill, one_at_a_time = p1.prefill, asyncio.Lock()

    async def queued_prefill(*args: Any, **kwargs: Any) -> PrefillReply:
        async with one_at_a_time:
            reply = await prefill(*args, **kwargs)
            now[0] += 1.0
            return reply

    p1.prefill = queued_prefill  # type: ignore[method-assign]
    async with running(fx) as router:
        await asyncio.gather(*(collect(router, request(LONG, rid=r)) for r in ("r1", "r2")))
        views = {v.address: v.prefill_tokens_per_second for v in router.workers()}
    # Without r1's 600 tokens ahead, r2 would read 300 tokens/s and pull the estimate
    # down to 510.
    assert views == {"p1": pytest.approx(600.0), "d1": None}


async def test_prefill_pool_at_zero_gives_the_same_tokens() -> None:
    with_pool, without = Fixture({"p1": P, "d1": D}), Fixture({"d1": D})
    async with running(with_pool) as a, running(without) as b:
        assert tokens(await collect(a, request(LONG))) == tokens(await collect(b, request(LONG)))
    assert (
        without.metric(
            "tandem_router_prefill_decisions_total", path="local", reason="no_prefill_workers"
        )
        == 1
    )
    assert without.metric("tandem_router_diverted_prompts_total") == 1
    assert with_pool.metric("tandem_router_diverted_prompts_total") == 0


async def test_short_prompt_with_the_pool_at_zero_is_not_diverted() -> None:
    fx = Fixture({"d1": D})
    async with running(fx) as router:
        await collect(router, request(SHORT))
    assert fx.metric("tandem_router_prefill_decisions_total", path="local", reason="short_prompt")
    assert fx.metric("tandem_router_diverted_prompts_total") == 0


async def test_prefill_failing_everywhere_falls_back_to_local() -> None:
    fx = Fixture({"p1": P, "p2": P, "d1": D})
    fx.workers["p1"].faults.prefill.append(WorkerErrorKind.INTERNAL)
    fx.workers["p2"].faults.prefill.append(WorkerErrorKind.INTERNAL)
    async with running(fx) as router:
        chunks = await collect(router, request(LONG))
    # p1 failed, the retry went to p2, which failed too: prefill locally, never fail.
    assert [fx.workers[p].prefill_calls for p in ("p1", "p2")] == [1, 1]
    assert fx.metric("tandem_router_retries_total", stage="prefill") == 1
    route = chunks[0].route
    assert route is not None and route.reason is DecisionReason.PREFILL_FAILED
    assert tokens(chunks) == expected(request(LONG))


async def test_prefill_retry_then_remote_success() -> None:
    fx = Fixture({"p1": P, "p2": P, "d1": D})
    fx.workers["p1"].faults.prefill.append(WorkerErrorKind.TIMEOUT)
    async with running(fx) as router:
        chunks = await collect(router, request(LONG))
    route = chunks[0].route
    assert route is not None and route.path is PrefillPath.REMOTE and route.prefill_worker == "p2"
    assert fx.metric("tandem_router_worker_errors_total", stage="prefill", kind="timeout") == 1


async def test_decode_busy_prompt_retries_on_the_other_saturated_prefill_worker() -> None:
    # Both prefill workers report a full queue and d1 streams: the prompt queues on p1
    # (decode_busy); p1 fails it, and the retry must not fall back to a local prefill that
    # would stall d1's stream just because p2 is saturated too.
    fx = Fixture(
        {"p1": P, "p2": P, "d1": D},
        policy=PolicyConfig(min_prefill_tokens=100, prefill_saturation_tokens=10**5),
    )
    for prefill in ("p1", "p2"):
        fx.workers[prefill].queued_prefill_tokens = 10**6
    fx.workers["d1"].token_delay = 0.01
    fx.workers["p1"].faults.prefill.append(WorkerErrorKind.INTERNAL)
    async with running(fx) as router:
        streaming = asyncio.create_task(collect(router, request(SHORT, 400, rid="s")))
        await eventually(lambda: fx.workers["d1"].active == 1)
        await router.poll_once()
        chunks = await collect(router, request(LONG))
        streaming.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await streaming
    route = chunks[0].route
    assert route is not None and route.path is PrefillPath.REMOTE
    assert (route.prefill_worker, route.reason) == ("p2", DecisionReason.DECODE_BUSY)
    assert fx.workers["d1"].local_prefills == 1  # the short prompt's only
    assert tokens(chunks) == expected(request(LONG))


async def test_all_prefill_failures_fall_back_to_local_prefill() -> None:
    fx = Fixture({"p1": P, "d1": D})
    fx.workers["p1"].kill()
    async with running(fx) as router:
        fx.workers["p1"].alive = True  # healthy at the poll, failing at the call
        await router.poll_once()
        fx.workers["p1"].faults.prefill.append(WorkerErrorKind.UNAVAILABLE)
        chunks = await collect(router, request(LONG))
    route = chunks[0].route
    assert route is not None and route.path is PrefillPath.LOCAL
    assert route.reason is DecisionReason.PREFILL_FAILED
    assert tokens(chunks) == expected(request(LONG))
    assert (
        fx.metric("tandem_router_prefill_decisions_total", path="local", reason="prefill_failed")
        == 1
    )


async def test_decode_worker_gone_before_first_token_retries_with_the_same_kv() -> None:
    fx = Fixture({"p1": P, "d1": D, "d2": D})
    fx.workers["d1"].faults.decode_before_first.append(WorkerErrorKind.UNAVAILABLE)
    async with running(fx) as router:
        chunks = await collect(router, request(LONG))
    route = chunks[0].route
    # d1 (first by key among idle workers) failed; d2 took the parked KV: still remote.
    assert route is not None and route.path is PrefillPath.REMOTE
    assert route.decode_worker == "d2"
    assert fx.workers["p1"].prefill_calls == 1
    assert fx.metric("tandem_router_retries_total", stage="decode") == 1
    assert tokens(chunks) == expected(request(LONG))
    assert fx.ledger.parked == {}


@pytest.mark.parametrize("kind", [WorkerErrorKind.KV_HANDOFF, WorkerErrorKind.INTERNAL])
async def test_kv_pull_failure_falls_back_to_local_prefill_and_releases(
    kind: WorkerErrorKind,
) -> None:
    fx = Fixture({"p1": P, "d1": D})
    fx.workers["d1"].faults.decode_before_first.append(kind)
    async with running(fx) as router:
        chunks = await collect(router, request(LONG))
        await eventually(lambda: fx.ledger.parked == {})
    route = chunks[0].route
    assert route is not None and route.path is PrefillPath.LOCAL
    assert route.reason is DecisionReason.PREFILL_FAILED
    assert "r1" in fx.ledger.released
    assert tokens(chunks) == expected(request(LONG))
    # Counted as a handoff that did not happen; this double sends no worker error code,
    # so never as a refusal for another engine config.
    assert fx.metric("tandem_router_kv_handoff_failures_total", reason="failed") == 1
    assert fx.metric("tandem_router_kv_handoff_failures_total", reason="config_mismatch") == 0


async def test_a_retry_never_hands_kv_to_a_decode_worker_of_another_revision() -> None:
    """Mid-rollout: p1 and d1 run the old engine config, d2 the new one. d1 fails before
    its first token, the retry goes to d2, which could not use p1's KV: the router gives
    that KV up and prefills on d2 instead of having d2 refuse it."""
    fx = Fixture({"p1": P, "d1": D, "d2": D})
    for address, digest in (("p1", "old"), ("d1", "old"), ("d2", "new")):
        fx.workers[address].config_digest = digest
    fx.workers["d2"].active = 4  # busier: d1 is the first choice
    fx.workers["d1"].faults.decode_before_first.append(WorkerErrorKind.UNAVAILABLE)
    async with running(fx) as router:
        chunks = await collect(router, request(LONG))
        await eventually(lambda: fx.ledger.parked == {})
    route = chunks[0].route
    assert route is not None and route.decode_worker == "d2"
    assert (route.path, route.reason) == (PrefillPath.LOCAL, DecisionReason.PREFILL_INCOMPATIBLE)
    assert fx.workers["p1"].prefill_calls == 1 and "r1" in fx.ledger.released
    assert fx.workers["d2"].local_prefills == 1
    assert fx.metric("tandem_router_kv_handoff_failures_total", reason="config_mismatch") == 0
    assert tokens(chunks) == expected(request(LONG))


async def test_busy_decode_workers_mean_429_other_failures_503() -> None:
    fx = Fixture({"d1": D, "d2": D})
    for worker in fx.workers.values():
        worker.faults.decode_before_first.append(WorkerErrorKind.CAPACITY)
    async with running(fx) as router:
        with pytest.raises(OverloadedError):
            await collect(router, request(SHORT))
        for worker in fx.workers.values():
            worker.faults.decode_before_first.append(WorkerErrorKind.INTERNAL)
        with pytest.raises(GenerationFailedError):
            await collect(router, request(SHORT))
        assert router.in_flight == 0
    assert fx.metric("tandem_router_rejected_requests_total", reason="workers_busy") == 1


async def test_failure_after_first_token_ends_the_stream_with_an_error() -> None:
    fx = Fixture({"d1": D})
    fx.workers["d1"].faults.decode_after_first.append(WorkerErrorKind.INTERNAL)
    async with running(fx) as router:
        got: list[GenerationChunk] = []
        with pytest.raises(GenerationFailedError):
            async for chunk in router.generate(request(SHORT)):
                got.append(chunk)
    assert len(got) == 1


async def test_no_decode_worker_is_a_503() -> None:
    fx = Fixture({"p1": P, "d1": D})
    fx.workers["d1"].kill()
    async with running(fx) as router:
        assert not router.ready()
        with pytest.raises(NoWorkerAvailableError):
            await collect(router, request(SHORT))
    assert fx.metric("tandem_router_rejected_requests_total", reason="no_worker") == 1


async def test_admission_is_bounded() -> None:
    fx = Fixture({"d1": D}, max_queued_requests=2, retry_after_seconds=3)
    fx.workers["d1"].prefill_delay = 0.2
    async with running(fx) as router:
        started = [
            asyncio.create_task(collect(router, request(SHORT, rid=f"r{i}"))) for i in (1, 2)
        ]
        await asyncio.sleep(0.01)
        with pytest.raises(OverloadedError) as refused:
            await collect(router, request(SHORT, rid="r3"))
        assert refused.value.retry_after_seconds == 3
        done = await asyncio.gather(*started)
    assert all(tokens(c) == expected(request(SHORT)) for c in done)
    assert fx.metric("tandem_router_rejected_requests_total", reason="queue_full") == 1


async def test_closing_the_stream_cancels_the_worker_call() -> None:
    fx = Fixture({"d1": D})
    fx.workers["d1"].token_delay = 0.01
    async with running(fx) as router:
        stream = router.generate(request(SHORT, max_tokens=100))
        first = await anext(stream)
        assert first.token_ids
        await stream.aclose()
    assert fx.workers["d1"].cancelled_streams == 1
    assert fx.workers["d1"].active == 0
    assert router.in_flight == 0


async def test_cancel_while_decode_pulls_kv_releases_the_parked_kv() -> None:
    fx = Fixture({"p1": P, "d1": D})
    fx.workers["d1"].pull_delay = 10.0
    async with running(fx) as router:
        task = asyncio.create_task(collect(router, request(LONG)))
        await eventually(lambda: fx.workers["d1"].decode_calls == 1)
        assert fx.ledger.parked == {"r1": "p1"}
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await eventually(lambda: fx.ledger.parked == {})
    assert fx.ledger.released == ["r1"]
    assert router.in_flight == 0


async def test_cancel_during_prefill_leaves_nothing_behind() -> None:
    fx = Fixture({"p1": P, "d1": D})
    fx.workers["p1"].prefill_delay = 10.0
    async with running(fx) as router:
        task = asyncio.create_task(collect(router, request(LONG)))
        await eventually(lambda: fx.workers["p1"].prefill_calls == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert fx.router.pool_loads()["prefill"].queued_tokens == 0
    assert fx.ledger.parked == {}
    assert router.in_flight == 0


async def test_first_token_ends_sequence_at_prefill() -> None:
    fx = Fixture({"p1": P, "d1": D})
    async with running(fx) as router:
        chunks = await collect(router, request(LONG, max_tokens=1))
        await eventually(lambda: fx.ledger.parked == {})
    assert tokens(chunks) == expected(request(LONG, max_tokens=1))
    assert chunks[-1].finish_reason == "length"
    assert fx.workers["d1"].decode_calls == 0


async def test_health_polls_track_deaths_and_restarts() -> None:
    fx = Fixture({"p1": P, "d1": D})
    async with running(fx) as router:
        assert router.ready()
        fx.workers["p1"].kill()
        await router.poll_once()
        states = {v.address: v for v in router.workers()}
        assert not states["p1"].healthy and states["p1"].last_error
        chunks = await collect(router, request(LONG))
        route = chunks[0].route
        assert route is not None and route.reason is DecisionReason.PREFILL_UNHEALTHY
        fx.workers["p1"].restart()
        await router.poll_once()
        assert {v.address: v.healthy for v in router.workers()} == {"p1": True, "d1": True}
        loads = router.pool_loads()
    assert loads["prefill"].healthy == 1 and loads["decode"].healthy == 1


async def test_membership_changes_add_and_retire_workers() -> None:
    fx = Fixture({"d1": D})
    extra = InProcessWorker("d2", D, fx.ledger)
    members = [Member("d1", D)]

    class Mutable:
        async def members(self) -> list[Member]:
            return list(members)

        def on_change(self, callback: Callable[[], None]) -> None:
            pass

        async def close(self) -> None:
            pass

    cluster = InProcessCluster([*fx.workers.values(), extra])
    router = Router(Mutable(), cluster, RouterMetrics(CollectorRegistry()), fx.router.config)
    async with router.running():
        members.append(Member("d2", D))
        await router.poll_once()
        assert {v.address for v in router.workers()} == {"d1", "d2"}
        members.pop(0)
        await router.poll_once()  # d1 retired (nothing in flight): closed and dropped
        assert {v.address for v in router.workers()} == {"d2"}
        assert fx.workers["d1"].closed
        chunks = await collect(router, request(SHORT))
    assert chunks[0].route is not None and chunks[0].route.decode_worker == "d2"


class WatchedMembership:
    """Members that change at the test's word and say so, as an EndpointSlice watch does."""

    def __init__(self, members: list[Member]) -> None:
        self.now = members
        self._callbacks: list[Callable[[], None]] = []

    async def members(self) -> list[Member]:
        return list(self.now)

    def on_change(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    def replace(self, members: list[Member]) -> None:
        self.now = members
        for callback in self._callbacks:
            callback()

    async def close(self) -> None:
        pass


async def test_a_watched_change_is_adopted_at_once_not_at_the_next_interval() -> None:
    fx = Fixture({"d1": D})  # health every hour: only a change can trigger a round
    extra = InProcessWorker("d2", D, fx.ledger)
    membership = WatchedMembership([Member("d1", D)])
    cluster = InProcessCluster([*fx.workers.values(), extra])
    router = Router(membership, cluster, RouterMetrics(CollectorRegistry()), fx.router.config)
    async with router.running():
        membership.replace([Member("d1", D), Member("d2", D)])
        await eventually(lambda: {w.address for w in router.workers() if w.healthy} == {"d1", "d2"})


async def test_a_request_during_a_rollout_waits_for_the_new_worker_instead_of_failing() -> None:
    # The old decode worker has just exited (its port refuses), the new one has just
    # joined: the request finds no usable worker for a moment and must not fail.
    fx = Fixture({"d1": D})
    new = InProcessWorker("d2", D, fx.ledger)
    membership = WatchedMembership([Member("d1", D)])
    cluster = InProcessCluster([*fx.workers.values(), new])
    router = Router(membership, cluster, RouterMetrics(CollectorRegistry()), fx.router.config)
    async with router.running():
        fx.workers["d1"].kill()
        membership.replace([Member("d2", D)])  # the round it wakes has not run yet
        chunks = await collect(router, request(SHORT))
    assert chunks[0].route is not None and chunks[0].route.decode_worker == "d2"
    assert tokens(chunks) == expected(request(SHORT))


async def test_with_nothing_changing_a_missing_worker_fails_at_once() -> None:
    fx = Fixture({"d1": D}, worker_wait_seconds=30.0)
    fx.workers["d1"].kill()
    async with running(fx) as router:
        started = asyncio.get_running_loop().time()
        with pytest.raises(NoWorkerAvailableError):
            await collect(router, request(SHORT))
    # No membership change pending and no unchecked worker: no reason to hold it.
    assert asyncio.get_running_loop().time() - started < 5.0


async def test_draining_waits_for_in_flight_and_refuses_new_requests() -> None:
    fx = Fixture({"d1": D})
    fx.workers["d1"].token_delay = 0.01
    async with running(fx) as router:
        running_request = asyncio.create_task(collect(router, request(SHORT, max_tokens=20)))
        await eventually(lambda: fx.workers["d1"].active == 1)
        assert await router.drain(grace_seconds=0) == 1
        assert not router.ready()
        with pytest.raises(NoWorkerAvailableError):
            await collect(router, request(SHORT))
        assert await router.drain(grace_seconds=10) == 0
        assert running_request.done() and len(tokens(running_request.result())) == 20


async def test_queue_gauges_reflect_in_flight_work() -> None:
    fx = Fixture({"p1": P, "d1": D})
    fx.workers["p1"].prefill_delay = 0.3
    async with running(fx) as router:
        task = asyncio.create_task(collect(router, request(LONG)))
        await eventually(lambda: fx.workers["p1"].prefill_calls == 1)
        queued = fx.metric("tandem_router_queue_depth_tokens", pool="prefill")
        requests = fx.metric("tandem_router_queue_depth_requests", pool="prefill")
        await task
        after = fx.metric("tandem_router_queue_depth_tokens", pool="prefill")
    assert (queued, requests, after) == (LONG, 1, 0)


async def test_a_stream_whose_decode_worker_fails_goes_on_elsewhere_token_for_token() -> None:
    # Each decode worker fails once after its first token: the stream moves twice and
    # the client still gets the uninterrupted run's tokens, none repeated or missing.
    fx = Fixture({"d1": D, "d2": D})
    for worker in fx.workers.values():
        worker.faults.decode_after_first.append(WorkerErrorKind.INTERNAL)
    req = request(SHORT, max_tokens=8)
    async with running(fx) as router:
        chunks = await collect(router, req)
    assert tokens(chunks) == expected(req)
    assert [c.route is not None for c in chunks] == [True] + [False] * (len(chunks) - 1)
    assert fx.metric("tandem_router_migrations_total", outcome="resumed") == 2
    # Each continuation was prefilled (prompt plus the tokens sent) on the other worker.
    assert sum(w.local_prefills for w in fx.workers.values()) == 3


async def test_past_the_migration_limit_the_stream_ends_with_an_error() -> None:
    fx = Fixture({"d1": D, "d2": D}, max_migrations=1)
    for worker in fx.workers.values():
        worker.faults.decode_after_first.append(WorkerErrorKind.INTERNAL)
    req = request(SHORT, max_tokens=8)
    got: list[GenerationChunk] = []
    async with running(fx) as router:
        with pytest.raises(GenerationFailedError, match=r"mid-stream .*\(1 migrations\)"):
            async for chunk in router.generate(req):
                got.append(chunk)
    assert tokens(got) == expected(req)[:2]  # one token from each worker, in order
    assert fx.metric("tandem_router_migrations_total", outcome="exhausted") == 1
