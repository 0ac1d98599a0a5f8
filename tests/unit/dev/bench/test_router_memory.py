"""The router-memory baseline: what the router sent where, as the removed index kept it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from tandem.engines.base import SamplingParams
from tandem.router.membership import Member, StaticMembership
from tandem.router.messages import GenerationRequest, RouterConfig
from tandem.router.metrics import RouterMetrics
from tandem.router.policy import DecisionReason, PolicyConfig, PrefillPath, WorkerRole
from tandem.router.service import Router
from tandem_dev.bench.router_memory import RecordingClient, RouterMemoryIndex
from tandem_dev.doubles.inprocess import InProcessCluster, InProcessWorker, KvLedger

PROMPT = [(i * 37 + 11) % 9000 for i in range(100)]  # 6 full blocks of 16


def test_a_prompt_is_remembered_as_its_full_blocks_on_the_worker_it_went_to() -> None:
    index = RouterMemoryIndex(16)
    index.record("a:1", PROMPT[:64])
    index.record("b:1", PROMPT)
    assert index.cached_tokens(PROMPT) == {"a:1": 64, "b:1": 96}
    assert index.cached_tokens(PROMPT[:40]) == {"a:1": 32, "b:1": 32}
    # Same tokens after a different beginning: the chained hashes do not match.
    assert index.cached_tokens([1, *PROMPT[1:]]) == {}
    index.record("c:1", PROMPT[:15])  # no full block: nothing to remember
    assert "c:1" not in index.cached_tokens(PROMPT)


def test_memory_is_bounded_and_drops_the_least_recent_blocks() -> None:
    index = RouterMemoryIndex(16, max_blocks_per_worker=4)
    index.record("a:1", PROMPT[:64])  # 4 blocks: full
    other = [t + 1 for t in PROMPT]
    index.record("a:1", other[:32])  # 2 more: the first 2 of PROMPT go
    assert index.cached_tokens(PROMPT) == {}
    assert index.cached_tokens(other) == {"a:1": 32}


def test_a_worker_that_leaves_or_restarts_is_forgotten() -> None:
    index = RouterMemoryIndex(16)
    index.record("a:1", PROMPT)
    assert index.remove("a:1") is True
    assert index.cached_tokens(PROMPT) == {}
    assert index.remove("a:1") is False


async def test_the_client_records_prefills_when_they_return_and_decodes_at_their_first_token() -> (
    None
):
    index = RouterMemoryIndex(16)
    ledger = KvLedger()
    prefill = RecordingClient(InProcessWorker("p:1", WorkerRole.PREFILL, ledger), index)
    decode = RecordingClient(InProcessWorker("d:1", WorkerRole.DECODE, ledger), index)
    sampling = SamplingParams(max_tokens=4)
    reply = await prefill.prefill("r1", PROMPT, sampling)
    assert index.cached_tokens(PROMPT) == {"p:1": 96}
    stream = decode.decode(
        "r1", PROMPT, sampling, remote_kv=reply.kv, first_token=reply.first_token
    )
    assert index.cached_tokens(PROMPT) == {"p:1": 96}  # nothing arrived yet
    first = await anext(stream)
    assert first.token_ids and index.cached_tokens(PROMPT) == {"p:1": 96, "d:1": 96}
    assert [c async for c in stream][-1].finish_reason is not None


async def test_leaving_a_recorded_decode_early_cancels_the_worker_stream() -> None:
    index = RouterMemoryIndex(16)
    worker = InProcessWorker("d:1", WorkerRole.DECODE)
    client = RecordingClient(worker, index)
    stream = client.decode("r1", PROMPT, SamplingParams(max_tokens=8))
    await anext(stream)
    await stream.aclose()  # type: ignore[attr-defined]
    assert worker.cancelled_streams == 1 and worker.active == 0


async def test_a_router_on_the_memory_sends_a_repeated_prompt_where_the_first_went() -> None:
    """The workers publish no KV events here: the route comes from the router's memory,
    through the index the router was given."""
    ledger = KvLedger()
    roles = {"p1": WorkerRole.PREFILL, "d1": WorkerRole.DECODE, "d2": WorkerRole.DECODE}
    workers = {a: InProcessWorker(a, r, ledger) for a, r in roles.items()}
    index = RouterMemoryIndex(16)
    inner = InProcessCluster(list(workers.values()))
    router = Router(
        StaticMembership([Member(a, r) for a, r in roles.items()]),
        lambda address: RecordingClient(inner(address), index),
        RouterMetrics(CollectorRegistry()),
        RouterConfig(policy=PolicyConfig(min_prefill_tokens=256), health_interval_seconds=0.02),
        index=index,
    )
    prompt = [(i * 37 + 3) % 250 for i in range(1000)]
    sampling = SamplingParams(max_tokens=2, seed=1)
    async with router.running():
        first = [c async for c in router.generate(GenerationRequest("r1", prompt, sampling))]
        again = [c async for c in router.generate(GenerationRequest("r2", prompt, sampling))]
    assert first[0].route is not None and again[0].route is not None
    assert first[0].route.path is PrefillPath.REMOTE
    assert again[0].route.path is PrefillPath.LOCAL
    assert again[0].route.reason is DecisionReason.CACHED_PREFIX
    assert again[0].route.decode_worker == first[0].route.decode_worker
    assert router.index is index
