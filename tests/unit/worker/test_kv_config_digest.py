"""A decode worker refuses KV from a prefill worker whose engine config digest differs
(another model, weights or KV layout): the bytes would fit, and decode into garbage.

Real workers on 127.0.0.1 (gRPC, TCP KV, reference engine) whose models differ only in
their weights' seed, so their KV layouts agree byte for byte. Asked directly, the decode
worker refuses the KV; the router in front of them (which learns every worker's digest
from Health) never pairs them and prefills locally, so the answer is the decode worker's
own.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from tandem.engines.base import SamplingParams
from tandem.engines.reference.config import ReferenceModelConfig
from tandem.router.membership import Member, StaticMembership
from tandem.router.messages import GenerationRequest, RouterConfig
from tandem.router.metrics import RouterMetrics
from tandem.router.policy import DecisionReason, PolicyConfig, PrefillPath, WorkerRole
from tandem.router.ports import HandoffFailure, classify_handoff_failure
from tandem.router.service import Router
from tandem.worker.client import WorkerClient
from tandem.worker.errors import WorkerCallError
from tandem.worker.types import Role

from .conftest import TINY_ENGINE, WorkerFactory

PROMPT = [(i * 29 + 7) % 200 + 20 for i in range(48)]
SAMPLING = SamplingParams(max_tokens=6, seed=1)


async def test_kv_from_another_config_is_refused_counted_and_the_router_falls_back(
    worker: WorkerFactory,
) -> None:
    async with (
        worker(Role.PREFILL, "p1", engine={"seed": 1}) as prefill,
        worker(Role.DECODE, "d1") as decode,
    ):
        # Same shapes, other weights: the KV layouts agree byte for byte.
        assert ReferenceModelConfig.from_options({**TINY_ENGINE, "seed": 1}).digest() != (
            ReferenceModelConfig.from_options(TINY_ENGINE).digest()
        )
        local = [
            t async for c in decode.client.decode("ref", PROMPT, SAMPLING) for t in c.token_ids
        ]

        reply = await prefill.client.prefill("direct", PROMPT, SAMPLING)
        assert reply.kv is not None
        try:
            stream = decode.client.decode(
                "direct", PROMPT, SAMPLING, remote_kv=reply.kv, first_token=reply.first_token
            )
            pulled = [t async for c in stream for t in c.token_ids]
        except WorkerCallError as exc:
            refusal: WorkerCallError | None = exc
            pulled = []
        else:
            refusal = None
        assert refusal is not None, f"decoded {pulled} from another model's KV"
        assert refusal.grpc_status == "ABORTED"
        # The status is every handoff failure's; the code sent with it says which.
        assert refusal.remote_code == "kv_config_mismatch"
        assert classify_handoff_failure(refusal) is HandoffFailure.CONFIG_MISMATCH
        assert "config" in refusal.message and reply.kv.config_digest in refusal.message
        assert await prefill.client.release("direct") is True

        members = [
            Member(prefill.address, WorkerRole.PREFILL),
            Member(decode.address, WorkerRole.DECODE),
        ]
        router = Router(
            StaticMembership(members),
            lambda address: WorkerClient(address, timeout_s=10.0),
            RouterMetrics(CollectorRegistry()),
            RouterConfig(policy=PolicyConfig(min_prefill_tokens=16), health_interval_seconds=3600),
        )
        async with router.running():
            chunks = [
                c async for c in router.generate(GenerationRequest("via-router", PROMPT, SAMPLING))
            ]

        registry = decode.service.metrics.registry
        refused = registry.get_sample_value(
            "tandem_worker_kv_refused_total", {"reason": "config_mismatch"}
        )
        held = (await prefill.client.stats()).held_for_transfer

    route = chunks[0].route
    assert route is not None and route.path is PrefillPath.LOCAL
    assert route.reason is DecisionReason.PREFILL_INCOMPATIBLE
    assert [t for c in chunks for t in c.token_ids] == local
    assert refused == 1  # the direct attempt; the router never sent p1's KV to d1
    assert held == 0
