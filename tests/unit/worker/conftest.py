from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tandem.engines.registry import make_engine
from tandem.kv import KvTransport, make_transport
from tandem.security import CredentialStore
from tandem.worker.client import WorkerClient
from tandem.worker.config import WorkerConfig
from tandem.worker.engine_runner import EngineRunner
from tandem.worker.grpc_server import add_service, create_server
from tandem.worker.service import WorkerService
from tandem.worker.types import Role

# The smallest reference model that is still a real transformer: fast on CPU.
TINY_ENGINE: dict[str, object] = {
    "num_layers": 2,
    "hidden": 32,
    "num_heads": 2,
    "num_kv_heads": 1,
    "head_dim": 16,
    "intermediate": 64,
    "num_kv_blocks": 1024,
}


@dataclass
class RunningWorker:
    service: WorkerService
    client: WorkerClient
    address: str


WorkerFactory = Callable[..., contextlib.AbstractAsyncContextManager[RunningWorker]]


@contextlib.asynccontextmanager
async def run_worker(
    role: Role,
    worker_id: str,
    *,
    engine: dict[str, object] | None = None,
    clock: Callable[[], float] | None = None,
    wrap_transport: Callable[[KvTransport], KvTransport] | None = None,
    wrap_engine: Callable[[Any], Any] | None = None,
    credentials: CredentialStore | None = None,
    **overrides: Any,
) -> AsyncIterator[RunningWorker]:
    """A worker on 127.0.0.1 (real gRPC, TCP KV); ``clock`` replaces the service's clock,
    ``wrap_transport`` / ``wrap_engine`` let a test interpose on its KV transport or
    engine; with ``credentials`` its gRPC and KV ports, its calls to peers and the
    test's client are mutual TLS."""
    config = WorkerConfig(
        role=role,
        worker_id=worker_id,
        incarnation=overrides.pop("incarnation", f"{worker_id}-1"),
        engine_options={**TINY_ENGINE, **(engine or {})},
        kv_backend="tcp",
        rpc_timeout_s=5.0,
        kv_transfer_timeout_s=5.0,
    )
    config = dataclasses.replace(config, **overrides)

    def build() -> Any:
        engine = make_engine("reference", config.engine_options)
        return engine if wrap_engine is None else wrap_engine(engine)

    runner = await EngineRunner.start(build)
    transport = make_transport(
        "tcp",
        worker_id=config.worker_id,
        incarnation=config.incarnation,
        host="127.0.0.1",
        credentials=credentials,
    )
    if wrap_transport is not None:
        transport = wrap_transport(transport)
    server, port = create_server("127.0.0.1", 0, credentials)
    address = f"127.0.0.1:{port}"
    timing = {} if clock is None else {"clock": clock}
    service = WorkerService(
        config, runner, transport, grpc_address=address, credentials=credentials, **timing
    )
    add_service(server, service)
    await service.start()
    await server.start()
    client = WorkerClient(address, timeout_s=10.0, decode_timeout_s=30.0, credentials=credentials)
    try:
        yield RunningWorker(service, client, address)
    finally:
        await client.close()
        await server.stop(grace=None)
        await service.stop()
        runner.shutdown()


@pytest.fixture
def worker() -> WorkerFactory:
    return run_worker
