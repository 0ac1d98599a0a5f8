"""Per-tenant limits and fair queuing (``tandem.frontend.tenancy``): the pure decisions
on hand-worked cases, then the asyncio gate over a fake router."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Mapping

import pytest
from prometheus_client import CollectorRegistry

from tandem.engines.base import SamplingParams
from tandem.frontend.config import TenancySettings, TenantLimits
from tandem.frontend.metrics import TenantMetrics
from tandem.frontend.tenancy import (
    PRIORITY_DEFAULT,
    PRIORITY_UNDER_SHARE,
    EntryState,
    Outcome,
    TenantGate,
    TenantRequestLimitError,
    TenantRequestTooLargeError,
    TenantScheduler,
    TenantTokenLimitError,
    TokenBucket,
    choose_victim,
    dispatch_bound,
    fair_priority,
    held_demand,
    tenant_label,
)
from tandem.router.errors import NoWorkerAvailableError, OverloadedError
from tandem.router.messages import GenerationChunk, GenerationRequest, RouterConfig, WorkerView

A_AND_B = TenancySettings(
    tenants={"a": TenantLimits(weight=1), "b": TenantLimits(weight=3)},
)


def admit_many(
    s: TenantScheduler, tenant: str, n: int, *, prompt: int = 10, capacity: int = 256
) -> None:
    for _ in range(n):
        assert s.admit(tenant, prompt, 5, now=0.0, capacity=capacity).outcome is Outcome.HELD


def release_one_at_a_time(s: TenantScheduler, n: int) -> list[str]:
    """Dispatch bound 1: the released requests get their first token before the next
    release (a tenant under its share may leave past the bound: ``under_share_depth``
    more at most)."""
    order: list[str] = []
    while len(order) < n:
        for entry in s.release(1):
            order.append(entry.tenant)
            s.first_token(entry)
    return order[:n]


# ---------------------------------------------------------------------- fair order


def test_a_newcomer_is_released_next_after_another_tenants_burst() -> None:
    s = TenantScheduler(A_AND_B)
    admit_many(s, "a", 50)
    first = s.release(2)
    assert [e.tenant for e in first] == ["a", "a"]
    admit_many(s, "b", 1)
    s.first_token(first[0])
    (nxt,) = s.release(2)
    assert nxt.tenant == "b"
    assert s.held == 48


# ---------------------------------------------------------------------- priority


def test_fair_priority_ranks_up_a_tenant_below_its_weighted_share() -> None:
    one = {"a": 1, "b": 1}
    assert fair_priority({"a": 0, "b": 8192}, one, "a") == PRIORITY_UNDER_SHARE
    assert fair_priority({"a": 0, "b": 8192}, one, "b") == PRIORITY_DEFAULT
    assert fair_priority({"a": 4096, "b": 4096}, one, "a") == PRIORITY_DEFAULT  # at share
    # b (weight 3) holds 2/3 of the tokens, below its 3/4; a holds 1/3, above its 1/4.
    weighted = {"a": 1, "b": 3}
    assert fair_priority({"a": 100, "b": 200}, weighted, "b") == PRIORITY_UNDER_SHARE
    assert fair_priority({"a": 100, "b": 200}, weighted, "a") == PRIORITY_DEFAULT


def test_fair_priority_ranks_nobody_up_alone_or_idle() -> None:
    assert fair_priority({}, {"a": 1}, "a") == PRIORITY_DEFAULT
    assert fair_priority({"a": 500}, {"a": 1}, "a") == PRIORITY_DEFAULT


def test_a_tenant_under_its_share_goes_past_a_full_bound_ranked_up() -> None:
    s = TenantScheduler(TenancySettings(), under_share_depth=2)
    admit_many(s, "heavy", 10, prompt=4096)
    sent = s.release(2)
    assert [e.priority for e in sent] == [PRIORITY_DEFAULT, PRIORITY_DEFAULT]
    s.first_token(sent[0])
    (more,) = s.release(2)  # the bound again: one of two awaiting their first token
    assert more.tenant == "heavy" and more.priority == PRIORITY_DEFAULT
    admit_many(s, "light", 4, prompt=4096)
    light = s.release(2)  # past the full bound, a worker's depth: light has nothing there
    assert [(e.tenant, e.priority) for e in light] == [("light", PRIORITY_UNDER_SHARE)] * 2
    assert s.dispatched == 4
    assert s.release(2) == []  # light's third waits: two of its own await their first token
    s.first_token(light[0])
    (third,) = s.release(2)  # 8,192 of 20,480 prompt tokens at the worker: under its share
    assert third.tenant == "light" and third.priority == PRIORITY_UNDER_SHARE
    s.first_token(light[1])
    assert s.release(2) == []  # 12,288 each: at its share, light waits for the bound too


def test_refusal_before_the_prompt_is_what_admission_would_refuse() -> None:
    settings = TenancySettings(tenants={"capped": TenantLimits(max_in_flight_requests=1)})
    s = TenantScheduler(settings)
    assert s.refusal("newcomer", capacity=2) is None  # no state made for asking
    assert s.held_entries() == []
    admit_many(s, "capped", 1, capacity=2)
    assert s.refusal("capped", capacity=2) is Outcome.REJECTED_IN_FLIGHT
    admit_many(s, "other", 1, capacity=2)
    # Full: "other" holds its share (1 of 2) and may displace nobody ...
    assert s.refusal("other", capacity=2) is Outcome.QUEUE_FULL
    # ... while a newcomer (a share of 2/3) may displace a tenant's held request.
    assert s.refusal("newcomer", capacity=2) is None
    assert s.admit("other", 10, 5, now=0.0, capacity=2).outcome is Outcome.QUEUE_FULL


def test_backlogged_tenants_share_slots_by_weight() -> None:
    # Equal prompts; A weight 1 (start tags 0, 10, 20...), B weight 3 (0, 3.3, 6.7, 10...);
    # ties go to the earlier arrival: A0 B0 B1 B2 A1 B3 B4 B5 | A2 B6 B7 B8 ...
    s = TenantScheduler(A_AND_B)
    admit_many(s, "a", 20)
    admit_many(s, "b", 20)
    assert release_one_at_a_time(s, 8) == ["a", "b", "b", "b", "a", "b", "b", "b"]
    later = release_one_at_a_time(s, 12)
    assert later.count("a") == 3 and later.count("b") == 9


def test_cost_is_prompt_tokens_per_weight() -> None:
    # Equal weights: a tenant with prompts 4x as long gets a quarter of the releases.
    s = TenantScheduler(TenancySettings())
    admit_many(s, "long", 10, prompt=400)
    admit_many(s, "short", 10, prompt=100)
    order = release_one_at_a_time(s, 10)
    assert order.count("short") == 8 and order.count("long") == 2


def test_one_tenant_is_fifo_and_released_at_once_while_there_is_room() -> None:
    s = TenantScheduler(TenancySettings())
    entries = []
    for i in range(3):
        admission = s.admit("anonymous", 10 + i, 5, now=0.0, capacity=8)
        assert admission.entry is not None
        entries.append(admission.entry)
        assert s.release(2) == ([admission.entry] if i < 2 else [])
    assert entries[2].state is EntryState.HELD
    s.first_token(entries[0])
    assert s.release(2) == [entries[2]]


def test_an_idle_tenant_does_not_bank_credit() -> None:
    # B was idle while A was served: it joins at the current virtual time, not at 0.
    s = TenantScheduler(TenancySettings(), under_share_depth=1)
    admit_many(s, "a", 10)
    assert release_one_at_a_time(s, 6) == ["a"] * 6
    admit_many(s, "b", 5)
    assert release_one_at_a_time(s, 6) == ["b", "a", "b", "a", "b", "a"]


# ---------------------------------------------------------------------- limits


def test_in_flight_limit_counts_held_dispatched_and_streaming() -> None:
    s = TenantScheduler(TenancySettings(defaults=TenantLimits(max_in_flight_requests=2)))
    one = s.admit("t", 10, 5, now=0.0, capacity=8).entry
    two = s.admit("t", 10, 5, now=0.0, capacity=8).entry
    assert one is not None and two is not None
    s.release(1)
    s.first_token(one)  # one streams, two is held
    refused = s.admit("t", 10, 5, now=0.0, capacity=8)
    assert refused.outcome is Outcome.REJECTED_IN_FLIGHT
    assert s.admit("other", 10, 5, now=0.0, capacity=8).outcome is Outcome.HELD
    s.finish(one, now=1.0)
    assert s.admit("t", 10, 5, now=1.0, capacity=8).outcome is Outcome.HELD


def test_token_bucket_reserves_prompt_plus_max_tokens_and_refunds_the_rest() -> None:
    # 600 tokens per minute: 10 per second, 600 at most.
    s = TenantScheduler(TenancySettings(defaults=TenantLimits(tokens_per_minute=600)))
    first = s.admit("t", 100, 200, now=0.0, capacity=8).entry
    second = s.admit("t", 100, 200, now=0.0, capacity=8).entry
    assert first is not None and second is not None
    refused = s.admit("t", 100, 200, now=0.0, capacity=8)
    assert (refused.outcome, refused.retry_after_seconds) == (Outcome.REJECTED_TOKENS, 30)
    # 15 s later the bucket holds 150: 15 s more to cover 300.
    assert s.admit("t", 100, 200, now=15.0, capacity=8).retry_after_seconds == 15
    # Fractions round up: at 15.5 s it holds 155, 14.5 s short.
    assert s.admit("t", 100, 200, now=15.5, capacity=8).retry_after_seconds == 15
    s.release(2)
    s.first_token(first)
    first.generated = 50
    s.finish(first, now=15.0)  # used 150 of 300: 150 back -> 150 + 150 = 300
    assert s.admit("t", 100, 200, now=15.0, capacity=8).outcome is Outcome.HELD


def test_a_request_never_served_gets_its_whole_reservation_back() -> None:
    s = TenantScheduler(TenancySettings(defaults=TenantLimits(tokens_per_minute=600)))
    entry = s.admit("t", 100, 500, now=0.0, capacity=8).entry
    assert entry is not None
    assert s.admit("t", 1, 1, now=0.0, capacity=8).outcome is Outcome.REJECTED_TOKENS
    s.finish(entry, now=0.0)  # cancelled while held
    assert s.held == 0
    again = s.admit("t", 100, 500, now=0.0, capacity=8).entry
    assert again is not None
    s.release(1)
    s.finish(again, now=0.0)  # the router refused it before its first token
    assert s.dispatched == 0
    assert s.admit("t", 100, 500, now=0.0, capacity=8).outcome is Outcome.HELD


def test_reservation_is_capped_at_the_bucket_and_overuse_is_owed() -> None:
    s = TenantScheduler(TenancySettings(defaults=TenantLimits(tokens_per_minute=600)))
    # prompt 100 + max_tokens 4000 > 600: reserves the whole bucket.
    entry = s.admit("t", 100, 4000, now=0.0, capacity=8).entry
    assert entry is not None and entry.reserved == 600
    s.release(1)
    s.first_token(entry)
    entry.generated = 1100
    s.finish(entry, now=0.0)  # used 1200: 600 owed, the bucket is at -600
    refused = s.admit("t", 10, 10, now=0.0, capacity=8)
    assert refused.retry_after_seconds == 62  # (20 + 600) / 10 per second


def test_a_prompt_larger_than_the_minute_can_never_fit() -> None:
    s = TenantScheduler(TenancySettings(defaults=TenantLimits(tokens_per_minute=600)))
    assert s.admit("t", 601, 1, now=0.0, capacity=8).outcome is Outcome.TOO_LARGE


def test_token_bucket_refills_continuously_up_to_capacity() -> None:
    bucket = TokenBucket.per_minute(120, now=0.0)
    bucket.level = 0.0
    assert bucket.seconds_until(30, now=10.0) == pytest.approx(5.0)
    bucket.refill(now=1000.0)
    assert bucket.level == 120.0


# ---------------------------------------------------------------------- displacement


def test_choose_victim_by_weighted_share() -> None:
    weights = {"a": 1, "b": 1, "c": 2}
    # Capacity 8, all three present: shares a=2, b=2, c=4.
    occupancy = {"a": 5, "b": 1, "c": 2}
    held = {"a": 3, "b": 0, "c": 1}
    assert choose_victim(occupancy, weights, held, "b", 8) == "a"
    assert choose_victim(occupancy, weights, held, "c", 8) == "a"
    assert choose_victim(occupancy, weights, held, "a", 8) is None  # over its own share
    # Over its share but nothing held (all sent on): nobody to displace.
    assert choose_victim({"a": 8}, {"a": 1, "b": 1}, {"a": 0}, "b", 8) is None


def test_full_queue_displaces_the_newest_held_request_of_the_tenant_most_over_share() -> None:
    s = TenantScheduler(TenancySettings())
    admit_many(s, "a", 4, capacity=4)
    sent = s.release(2)
    a2, a3 = s.held_entries()
    in_b = s.admit("b", 10, 5, now=0.0, capacity=4)
    assert in_b.outcome is Outcome.HELD and in_b.displaced is a3
    assert a3.state is EntryState.REFUSED
    # Shares 2 and 2: B holds 1, A 3 -> A's newest held again.
    assert s.admit("b", 10, 5, now=0.0, capacity=4).displaced is a2
    # B now holds its share: the next one is refused.
    assert s.admit("b", 10, 5, now=0.0, capacity=4).outcome is Outcome.QUEUE_FULL
    assert s.admit("a", 10, 5, now=0.0, capacity=4).outcome is Outcome.QUEUE_FULL
    for entry in (a2, a3):
        s.finish(entry, now=0.0)
    assert s.tenant_in_flight("a") == 2
    s.first_token(sent[0])
    # b has nothing at the worker, under its share: past the bound, a worker's depth.
    assert [e.tenant for e in s.release(2)] == ["b", "b"]


# ---------------------------------------------------------------------- helpers


def test_tenant_label_is_bounded_by_the_named_tenants() -> None:
    assert tenant_label("a", A_AND_B) == "a"
    assert tenant_label("anonymous", A_AND_B) == "anonymous"
    assert tenant_label("someone-else", A_AND_B) == "other"


def _view(key: str, role: str = "both", healthy: bool = True, draining: bool = False) -> WorkerView:
    return WorkerView(key, role, healthy, draining, worker_id="", in_flight=0, last_error="")


def test_dispatch_bound_follows_ready_workers() -> None:
    workers = [_view("p", "prefill"), _view("d1", "decode"), _view("d2", "decode")]
    assert dispatch_bound(workers, 2, 256) == 6
    assert dispatch_bound([*workers[:2], _view("d2", draining=True)], 2, 256) == 4
    assert dispatch_bound([_view("x", healthy=False)], 2, 256) == 2  # at least the depth
    assert dispatch_bound(workers, 2, 5) == 5  # never beyond the queue bound


def test_held_demand_goes_to_the_pool_that_will_prefill_it() -> None:
    s = TenantScheduler(TenancySettings())
    s.admit("t", 1000, 5, now=0.0, capacity=8)
    s.admit("t", 10, 5, now=0.0, capacity=8)
    split = [_view("p", "prefill"), _view("d", "decode")]
    assert held_demand(s.held_entries(), split, 512) == {
        "prefill": (1, 1000),
        "decode": (1, 10),
    }
    assert held_demand(s.held_entries(), [_view("b", "both")], 512) == {
        "prefill": (0, 0),
        "decode": (2, 1010),
    }


# ---------------------------------------------------------------------- the gate


class FakeRouter:
    """A router whose requests give their first token and end when the test says."""

    def __init__(self, *, ready: int = 1, max_queued: int = 8) -> None:
        self.config = RouterConfig(
            max_queued_requests=max_queued, retry_after_seconds=3, health_interval_seconds=0.01
        )
        self.draining = False
        self.ready = ready
        self.started: list[str] = []
        self.priorities: dict[str, int] = {}
        self.first: dict[str, asyncio.Event] = {}
        self.end: dict[str, asyncio.Event] = {}
        self.sources: list[Callable[[], Mapping[str, tuple[int, int]]]] = []

    def workers(self) -> list[WorkerView]:
        return [_view(f"w{i}") for i in range(self.ready)]

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[GenerationChunk, None]:
        if self.draining:
            raise NoWorkerAvailableError("this frontend is shutting down; retry on another")
        rid = request.request_id
        self.started.append(rid)
        self.priorities[rid] = request.sampling.priority
        await self.first.setdefault(rid, asyncio.Event()).wait()
        yield GenerationChunk((1,))
        await self.end.setdefault(rid, asyncio.Event()).wait()
        yield GenerationChunk((2, 3), finish_reason="stop")

    async def wait_round(self, timeout_s: float) -> None:
        await asyncio.sleep(timeout_s)

    def count_queued(self, source: Callable[[], Mapping[str, tuple[int, int]]]) -> None:
        self.sources.append(source)

    def give_first(self, rid: str) -> None:
        self.first.setdefault(rid, asyncio.Event()).set()

    def finish(self, rid: str) -> None:
        self.give_first(rid)
        self.end.setdefault(rid, asyncio.Event()).set()


def make_gate(
    router: FakeRouter, settings: TenancySettings = A_AND_B, depth: int = 2
) -> tuple[TenantGate, CollectorRegistry]:
    registry = CollectorRegistry()
    return TenantGate(router, settings, TenantMetrics(registry), dispatch_depth=depth), registry


def request(rid: str, prompt: int = 10, max_tokens: int = 5) -> GenerationRequest:
    return GenerationRequest(rid, [1] * prompt, SamplingParams(max_tokens=max_tokens))


async def eventually(check: Callable[[], bool], within: float = 5.0) -> None:
    """Poll ``check`` until it holds; fails the test after ``within`` seconds."""
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110 - polling state owned by fakes
            await asyncio.sleep(0.002)


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


class Call:
    """One request through the gate: its first chunk arrives in ``task``."""

    def __init__(self, gate: TenantGate, tenant: str, rid: str, **kw: int) -> None:
        self.rid = rid
        self.stream = gate.generate(tenant, request(rid, **kw))
        self.task = asyncio.ensure_future(anext(self.stream))

    async def drain(self) -> list[GenerationChunk]:
        chunks = [await self.task]
        chunks += [c async for c in self.stream]
        return chunks


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def test_single_tenant_goes_straight_through_while_there_is_room() -> None:
    router = FakeRouter(ready=1)
    gate, registry = make_gate(router, TenancySettings())
    calls = [Call(gate, "anonymous", f"r{i}") for i in range(2)]
    await settle()
    assert router.started == ["r0", "r1"] and gate.held == 0
    router.finish("r0")
    router.finish("r1")
    for call in calls:
        assert len(await call.drain()) == 2
    assert gate.dispatched == 0
    assert (
        sample(
            registry,
            "tandem_frontend_tenant_requests_total",
            tenant="anonymous",
            outcome="admitted",
        )
        == 2
    )
    assert (
        sample(
            registry, "tandem_frontend_tenant_tokens_total", tenant="anonymous", kind="generated"
        )
        == 6
    )
    assert (
        sample(registry, "tandem_frontend_tenant_queue_wait_seconds_count", tenant="anonymous") == 2
    )


async def test_held_request_leaves_on_a_first_token_in_fair_order() -> None:
    router = FakeRouter(ready=1)  # bound 2
    gate, registry = make_gate(router)
    burst = [Call(gate, "a", f"a{i}") for i in range(6)]
    await settle()
    assert router.started == ["a0", "a1"] and gate.held == 4
    assert sample(registry, "tandem_frontend_tenant_held_requests", tenant="a") == 4
    light = Call(gate, "b", "b0")
    await settle()
    router.give_first("a0")
    await settle()
    assert router.started == ["a0", "a1", "b0"]
    assert router.sources[0]() == {"prefill": (0, 0), "decode": (4, 40)}
    for rid in ["a0", "a1", "b0", "a2", "a3", "a4", "a5"]:
        router.finish(rid)
        await settle()
    for call in [*burst, light]:
        await call.drain()
    assert gate.held == 0 and gate.dispatched == 0
    assert router.sources[0]() == {}


async def test_health_round_releases_held_requests_when_workers_become_ready() -> None:
    router = FakeRouter(ready=0)  # bound: the depth alone
    gate, _ = make_gate(router, depth=1)
    calls = [Call(gate, "a", f"r{i}") for i in range(3)]
    await settle()
    assert router.started == ["r0"]
    router.ready = 3
    await eventually(lambda: len(router.started) == 3)  # health rounds every 10 ms here
    assert router.started == ["r0", "r1", "r2"]
    for call in calls:
        router.finish(call.rid)
        await call.drain()


async def test_the_router_gets_the_priority_the_gate_decided() -> None:
    router = FakeRouter(ready=1)
    gate, _ = make_gate(router, TenancySettings(), depth=1)
    heavy = [Call(gate, "heavy", f"h{i}") for i in range(2)]
    await settle()
    light = Call(gate, "light", "l0")
    await settle()
    assert router.started == ["h0", "l0"]  # past the full bound
    assert router.priorities == {"h0": PRIORITY_DEFAULT, "l0": PRIORITY_UNDER_SHARE}
    for rid in ["h0", "l0", "h1"]:
        router.finish(rid)
        await settle()
    for call in [*heavy, light]:
        await call.drain()
    assert router.priorities["h1"] == PRIORITY_DEFAULT  # h0 and l0 streaming: both at share


async def test_displaced_request_gets_429_with_retry_after() -> None:
    router = FakeRouter(ready=1, max_queued=4)
    gate, registry = make_gate(router, TenancySettings())
    burst = [Call(gate, "a", f"a{i}") for i in range(4)]
    await settle()
    newcomer = Call(gate, "b", "b0")
    await settle()
    with pytest.raises(OverloadedError) as refused:
        await burst[3].task
    assert refused.value.retry_after_seconds == 3
    assert refused.value.code == "rate_limit_exceeded"
    assert (
        sample(
            registry, "tandem_frontend_tenant_requests_total", tenant="other", outcome="displaced"
        )
        == 1
    )
    # b holds nothing at the worker: b0 goes past the full bound; a2 stays held.
    assert gate.held == 1 and router.started == ["a0", "a1", "b0"]
    for rid in ["a0", "a1", "a2", "b0"]:
        router.finish(rid)
        await settle()
    for call in [*burst[:3], newcomer]:
        await call.drain()


async def test_a_client_that_leaves_while_held_leaves_the_queue() -> None:
    router = FakeRouter(ready=1)
    gate, registry = make_gate(router, depth=1)
    first = Call(gate, "a", "a0")
    held = Call(gate, "a", "a1")
    await settle()
    assert gate.held == 1
    held.task.cancel()
    await settle()
    await held.stream.aclose()
    assert gate.held == 0
    assert sample(registry, "tandem_frontend_tenant_held_requests", tenant="a") == 0
    assert (
        sample(registry, "tandem_frontend_tenant_requests_total", tenant="a", outcome="cancelled")
        == 1
    )
    after = Call(gate, "a", "a2")
    router.finish("a0")
    await first.drain()
    await settle()
    assert router.started == ["a0", "a2"]
    router.finish("a2")
    await after.drain()


async def test_draining_sends_held_requests_on_to_be_refused() -> None:
    router = FakeRouter(ready=1)
    gate, _ = make_gate(router, depth=1)
    first = Call(gate, "a", "a0")
    held = Call(gate, "a", "a1")
    await settle()
    router.draining = True
    with pytest.raises(NoWorkerAvailableError):
        await asyncio.wait_for(held.task, 1.0)
    assert gate.held == 0
    router.finish("a0")
    await first.drain()


async def test_tenant_limits_answer_at_once() -> None:
    router = FakeRouter(ready=1)
    settings = TenancySettings(
        tenants={"a": TenantLimits(max_in_flight_requests=1, tokens_per_minute=600)}
    )
    gate, registry = make_gate(router, settings)
    first = Call(gate, "a", "a0", prompt=100, max_tokens=100)
    with pytest.raises(TenantRequestLimitError) as in_flight:
        await Call(gate, "a", "a1").task
    assert (in_flight.value.http_status, in_flight.value.type) == (429, "requests")
    assert "at most 1 requests in flight" in in_flight.value.message
    router.finish("a0")
    await first.drain()  # used 100 + 3: 97 back, 497 left
    with pytest.raises(TenantTokenLimitError) as tokens:
        await Call(gate, "a", "a2", prompt=100, max_tokens=500).task
    assert tokens.value.retry_after_seconds == 11  # 103 short at 10 per second
    assert "600" in tokens.value.message and tokens.value.type == "tokens"
    with pytest.raises(TenantRequestTooLargeError) as too_large:
        await Call(gate, "a", "a3", prompt=700).task
    assert too_large.value.http_status == 400
    assert (
        sample(
            registry, "tandem_frontend_tenant_requests_total", tenant="a", outcome="rejected_tokens"
        )
        == 2
    )
    assert (
        sample(
            registry,
            "tandem_frontend_tenant_requests_total",
            tenant="a",
            outcome="rejected_in_flight",
        )
        == 1
    )


async def test_queue_full_for_a_tenant_at_its_share() -> None:
    router = FakeRouter(ready=1, max_queued=2)
    gate, registry = make_gate(router, TenancySettings())
    calls = [Call(gate, "a", f"a{i}") for i in range(2)]
    await settle()
    with pytest.raises(OverloadedError) as full:
        await Call(gate, "a", "a2").task
    assert "capacity" in full.value.message
    assert (
        sample(
            registry, "tandem_frontend_tenant_requests_total", tenant="other", outcome="queue_full"
        )
        == 1
    )
    for call in calls:
        router.finish(call.rid)
        await call.drain()
