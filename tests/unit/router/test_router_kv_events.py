"""Routers follow every worker's KV events: they route to the worker that caches a
prompt, drop workers that leave or restart, and every replica agrees."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from prometheus_client import CollectorRegistry

from tandem.engines.base import SamplingParams
from tandem.kv.block_hashes import compute_block_names
from tandem.kv.events import BlocksStored, Tier
from tandem.router.membership import Member
from tandem.router.messages import GenerationRequest, RouterConfig
from tandem.router.metrics import RouterMetrics
from tandem.router.policy import DecisionReason, PolicyConfig, PrefillPath, WorkerRole
from tandem.router.service import Router
from tandem_dev.doubles.inprocess import (
    KV_BLOCK_SIZE,
    InProcessCluster,
    InProcessWorker,
    KvLedger,
)

P, D = WorkerRole.PREFILL, WorkerRole.DECODE
PROMPT = [(i * 37 + 3) % 250 for i in range(2000)]


class Members:
    def __init__(self, members: list[Member]) -> None:
        self.now = members

    async def members(self) -> list[Member]:
        return list(self.now)

    def on_change(self, callback: Callable[[], None]) -> None:
        pass

    async def close(self) -> None:
        pass


class Replica:
    def __init__(self, cluster: InProcessCluster, members: Members) -> None:
        self.registry = CollectorRegistry()
        self.router = Router(
            members,
            cluster,
            RouterMetrics(self.registry),
            RouterConfig(policy=PolicyConfig(min_prefill_tokens=256), health_interval_seconds=0.02),
        )

    def cached(self, prompt: list[int] = PROMPT) -> dict[str, int]:
        return self.router.index.cached_tokens(prompt)


async def eventually(check: Callable[[], bool], within: float = 10.0) -> None:
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110 - state owned by the routers under test
            await asyncio.sleep(0.01)


def cache(worker: InProcessWorker, tokens: list[int], tier: Tier = Tier.DEVICE) -> None:
    names = tuple(compute_block_names(tokens, KV_BLOCK_SIZE))
    worker.publish_kv([BlocksStored(None, names, tier)])


@contextlib.asynccontextmanager
async def cluster(
    roles: dict[str, WorkerRole], replicas: int = 1
) -> AsyncIterator[tuple[dict[str, InProcessWorker], Members, list[Replica]]]:
    ledger = KvLedger()
    workers = {a: InProcessWorker(a, r, ledger) for a, r in roles.items()}
    members = Members([Member(a, r) for a, r in roles.items()])
    fleet = [Replica(InProcessCluster(list(workers.values())), members) for _ in range(replicas)]
    async with contextlib.AsyncExitStack() as stack:
        for replica in fleet:
            await stack.enter_async_context(replica.router.running())
        yield workers, members, fleet


async def route_of(replica: Replica, rid: str, prompt: list[int] = PROMPT) -> object:
    request = GenerationRequest(rid, prompt, SamplingParams(max_tokens=2, seed=1))
    chunks = [c async for c in replica.router.generate(request)]
    return chunks[0].route


async def test_every_replica_routes_to_the_workers_that_cache_the_prompt() -> None:
    async with cluster({"p1": P, "p2": P, "d1": D, "d2": D}, replicas=2) as (w, _, fleet):
        cache(w["d2"], PROMPT[:1600])
        cache(w["p2"], PROMPT[:1200])
        for replica in fleet:
            await eventually(lambda r=replica: r.cached() == {"d2": 1600, "p2": 1200})  # type: ignore[misc]
        routes = [await route_of(replica, f"r{i}") for i, replica in enumerate(fleet)]
        snapshots = [
            replica.registry.get_sample_value("tandem_router_kv_snapshots_total")
            for replica in fleet
        ]
    for route in routes:
        assert route.decode_worker == "d2" and route.prefill_worker == "p2"  # type: ignore[attr-defined]
    assert snapshots == [4.0, 4.0]  # each replica subscribed to each worker once


async def test_a_mostly_cached_prompt_prefills_on_its_decode_worker() -> None:
    async with cluster({"p1": P, "d1": D, "d2": D}) as (w, _, (replica,)):
        cache(w["d1"], PROMPT[:1920])
        await eventually(lambda: replica.cached() == {"d1": 1920})
        route = await route_of(replica, "r1")
    assert route.path is PrefillPath.LOCAL and route.decode_worker == "d1"  # type: ignore[attr-defined]
    assert route.reason is DecisionReason.CACHED_PREFIX  # type: ignore[attr-defined]


async def test_a_prompt_held_on_disk_outweighs_a_shorter_one_on_device() -> None:
    async with cluster({"p1": P, "d1": D, "d2": D}) as (w, _, (replica,)):
        cache(w["d1"], PROMPT[:640])
        cache(w["d2"], PROMPT[:1920], Tier.DISK)
        held = {"d1": {Tier.DEVICE: 640}, "d2": {Tier.DISK: 1920}}
        await eventually(lambda: replica.router.index.cached_by_tier(PROMPT) == held)
        route = await route_of(replica, "r1")
    # d2 would onboard 1920 tokens (worth ~1870 computed ones); d1 would compute 1360.
    assert route.decode_worker == "d2" and route.path is PrefillPath.LOCAL  # type: ignore[attr-defined]
    assert route.reason is DecisionReason.CACHED_PREFIX  # type: ignore[attr-defined]


async def test_a_disk_slower_than_computing_is_worth_nothing_to_the_router() -> None:
    # As above, but d2 reports its disk onboards a token in 2 ms and computes one in 1 ms
    # (a GPU's prefill against a slow disk): its disk prefix saves nothing, d1 wins.
    async with cluster({"p1": P, "d1": D, "d2": D}) as (w, _, (replica,)):
        w["d2"].prefill_seconds_per_token = 1e-3
        w["d2"].onboard_seconds_per_token = {Tier.DISK: 2e-3}
        cache(w["d1"], PROMPT[:640])
        cache(w["d2"], PROMPT[:1920], Tier.DISK)
        held = {"d1": {Tier.DEVICE: 640}, "d2": {Tier.DISK: 1920}}
        await eventually(lambda: replica.router.index.cached_by_tier(PROMPT) == held)
        for _ in range(2):  # a whole health round after the figures were set
            await replica.router.wait_round(5)
        route = await route_of(replica, "r1")
    assert route.decode_worker == "d1"  # type: ignore[attr-defined]


async def test_workers_that_leave_or_restart_are_dropped_from_the_index() -> None:
    async with cluster({"d1": D, "d2": D, "d3": D}) as (w, members, (replica,)):
        for key in ("d1", "d2", "d3"):
            cache(w[key], PROMPT[:320])
        await eventually(lambda: replica.cached() == {"d1": 320, "d2": 320, "d3": 320})
        members.now = [m for m in members.now if m.address != "d1"]  # d1 scaled away
        await eventually(lambda: "d1" not in replica.cached())
        w["d2"].restart()  # a new process: its cache is empty
        await eventually(lambda: replica.cached() == {"d3": 320})
        cache(w["d2"], PROMPT[:160])  # the new incarnation caches something
        await eventually(lambda: replica.cached() == {"d2": 160, "d3": 320})
        w["d3"].kill()
        await eventually(lambda: replica.cached() == {"d2": 160})
        failures = replica.registry.get_sample_value("tandem_router_kv_event_stream_failures_total")
    assert failures is not None and failures >= 2
