"""An in-process frontend (real app, router and serving) over in-process workers."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette

from tandem.api.v1alpha1 import ModelSpec
from tandem.frontend.config import (
    DisaggregationSettings,
    FrontendConfig,
    FrontendSettings,
    RouterTuning,
)
from tandem.frontend.server import build_frontend
from tandem.router.membership import Member, StaticMembership
from tandem.router.policy import WorkerRole
from tandem.router.service import Router
from tandem.tokenization import ByteTokenizer
from tandem.tokenization.selection import fingerprint
from tandem_dev.doubles.inprocess import InProcessCluster, InProcessWorker, KvLedger

MODEL = "tiny"


def make_config(**overrides: object) -> FrontendConfig:
    base: dict[str, object] = {
        "model": ModelSpec(
            name="org/tiny", served_name=MODEL, max_input_tokens=2048, max_output_tokens=64
        ),
        "frontend": FrontendSettings(
            disaggregation=DisaggregationSettings(min_prefill_tokens=100), max_queued_requests=8
        ),
        "router": RouterTuning(health_interval_seconds=3600.0),
    }
    return FrontendConfig(**{**base, **overrides})  # type: ignore[arg-type]


@dataclass
class Frontend:
    app: Starlette
    client: httpx.AsyncClient
    router: Router
    registry: CollectorRegistry
    workers: dict[str, InProcessWorker]
    ledger: KvLedger

    def metric(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0


@contextlib.asynccontextmanager
async def frontend(
    roles: dict[str, WorkerRole] | None = None, **config: object
) -> AsyncIterator[Frontend]:
    roles = roles or {"p1": WorkerRole.PREFILL, "d1": WorkerRole.DECODE}
    ledger = KvLedger()
    same_tokenizer = fingerprint(ByteTokenizer())
    workers = {
        a: InProcessWorker(a, r, ledger, tokenizer_fingerprint=same_tokenizer)
        for a, r in roles.items()
    }
    registry = CollectorRegistry()
    ids = itertools.count(1)
    app, router = build_frontend(
        make_config(**config),
        InProcessCluster(list(workers.values())),
        membership=StaticMembership([Member(a, r) for a, r in roles.items()]),
        registry=registry,
        id_factory=lambda: f"req{next(ids)}",
    )
    transport = httpx.ASGITransport(app=app)
    async with (
        router.running(),
        httpx.AsyncClient(transport=transport, base_url="http://frontend") as client,
    ):
        yield Frontend(app, client, router, registry, workers, ledger)
