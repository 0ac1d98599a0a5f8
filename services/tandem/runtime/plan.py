"""``tandem up`` as a pure function: an InferenceCluster -> the processes to run.

The plan names every process (frontend, ``prefill-0``..., ``decode-0``...), its command
line, environment, port and log file, and the documents to write before starting them
(the frontend's configuration -- the same contract document the operator mounts in
pods -- and the worker membership file the frontend watches). Ports are inputs:
choosing free ones is I/O and happens in the launcher. Every process gets
``--credentials <state dir>/credentials/<role>``: the cluster's own CA bundle and the
certificate of its role (``worker`` or ``frontend``), which the supervisor issues when it
starts the cluster, so frontend and workers talk mutual TLS even on one machine and the
frontend cannot read KV from workers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tandem.api.v1alpha1 import EngineKind, InferenceCluster, PoolRole, PoolSpec
from tandem.engines.reference.spec_options import render_offload_options
from tandem.engines.simulated.config import render_simulated_options
from tandem.frontend.config import ApiKeySettings, render_frontend_config
from tandem.router.membership import Member, render_members
from tandem.router.policy import WorkerRole
from tandem.security.credentials import identity_dir
from tandem.security.identity import Identity
from tandem.telemetry.tracing import tracing_env
from tandem.tokenization.selection import choose_tokenizer

LOCAL_HOST = "127.0.0.1"
WORKER_MODULE = "tandem.worker"
CONTRACT_VERSION = 1


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    name: str  # frontend | prefill-N | decode-N
    component: str  # frontend | prefill | decode
    argv: tuple[str, ...]
    port: int
    log: Path
    env: tuple[tuple[str, str], ...] = ()
    # Where peers reach it: loopback, unless a fault test placed it in a network namespace.
    host: str = LOCAL_HOST

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class PoolPlan:
    role: PoolRole
    min_replicas: int
    max_replicas: int
    workers: tuple[ProcessSpec, ...]


@dataclass(frozen=True, slots=True)
class LocalPlan:
    cluster: str
    state_dir: Path
    frontend: ProcessSpec
    pools: Mapping[PoolRole, PoolPlan]
    # Files to write before starting anything: path -> content.
    documents: Mapping[Path, str] = field(default_factory=dict)
    # The worker program (``python -m MODULE``); another one can stand in for tests.
    worker_module: str = WORKER_MODULE
    kv_backend: str | None = None  # overrides spec.kvTransfer.backend

    @property
    def endpoint(self) -> str:
        return f"http://{LOCAL_HOST}:{self.frontend.port}/v1"

    @property
    def workers(self) -> tuple[ProcessSpec, ...]:
        return tuple(w for pool in self.pools.values() for w in pool.workers)

    @property
    def members_file(self) -> Path:
        return self.state_dir / "members.json"

    @property
    def credentials_dir(self) -> Path:
        return credentials_dir(self.state_dir)


def credentials_dir(state_dir: Path) -> Path:
    """Where a local cluster's credentials live (written by the supervisor, 0600)."""
    return state_dir / "credentials"


def role_credentials_dir(state_dir: Path, identity: Identity) -> Path:
    """The credentials processes of role ``identity`` get (``credentials_dir``'s
    ``worker/`` or ``frontend/``)."""
    return identity_dir(credentials_dir(state_dir), identity)


def count_workers(cluster: InferenceCluster) -> int:
    """How many worker ports ``plan_local`` needs."""
    return cluster.spec.prefill.replicas + cluster.spec.decode.replicas


def plan_local(
    cluster: InferenceCluster,
    *,
    state_dir: Path,
    frontend_port: int,
    worker_ports: Sequence[int],
    python: str,
    worker_module: str = WORKER_MODULE,
    kv_backend: str | None = None,
    api_key_dirs: Sequence[Path] = (),
) -> LocalPlan:
    """The local processes and documents for ``cluster`` (pure). ``api_key_dirs``:
    directories of API key records the frontend requires (none: keyless on loopback)."""
    if len(worker_ports) != count_workers(cluster):
        raise ValueError(f"need {count_workers(cluster)} worker ports, got {len(worker_ports)}")
    ports = iter(worker_ports)
    pools = {}
    for role in (PoolRole.PREFILL, PoolRole.DECODE):
        pool = _pool_spec(cluster, role)
        workers = tuple(
            plan_worker(
                cluster,
                role,
                index,
                next(ports),
                state_dir=state_dir,
                python=python,
                worker_module=worker_module,
                kv_backend=kv_backend,
            )
            for index in range(pool.replicas)
        )
        pools[role] = PoolPlan(role, pool.min_replicas, pool.max_replicas, workers)
    members = [
        Member(w.address, WorkerRole(w.component)) for p in pools.values() for w in p.workers
    ]
    members_file = state_dir / "members.json"
    frontend_doc = render_frontend_config(
        cluster,
        {role.value: f"file://{members_file}" for role in PoolRole},
        api_keys=ApiKeySettings(directories=[str(d) for d in api_key_dirs])
        if api_key_dirs
        else None,
    )
    frontend_config = state_dir / "frontend.json"
    frontend = ProcessSpec(
        name="frontend",
        component="frontend",
        argv=(
            python, "-m", "tandem.frontend",
            "--config", str(frontend_config),
            "--host", LOCAL_HOST,
            "--port", str(frontend_port),
            "--credentials", str(role_credentials_dir(state_dir, Identity.FRONTEND)),
        ),
        port=frontend_port,
        log=state_dir / "logs" / "frontend.log",
        env=_tracing_env(cluster),
    )  # fmt: skip
    documents = {
        frontend_config: _dump(frontend_doc),
        members_file: render_members(members),
    }
    return LocalPlan(
        cluster=cluster.metadata.name,
        state_dir=state_dir,
        frontend=frontend,
        pools=pools,
        documents=documents,
        worker_module=worker_module,
        kv_backend=kv_backend,
    )


def plan_worker(
    cluster: InferenceCluster,
    role: PoolRole,
    index: int,
    port: int,
    *,
    state_dir: Path,
    python: str,
    worker_module: str = WORKER_MODULE,
    kv_backend: str | None = None,
) -> ProcessSpec:
    """One worker process; also what the autoscaler seam uses to add a worker.

    ``kv_backend`` overrides ``spec.kvTransfer.backend`` (the launcher falls back to
    tcp where NIXL is not installed)."""
    spec = cluster.spec
    pool = _pool_spec(cluster, role)
    name = f"{role.value}-{index}"
    options = _merge(spec.engine.options.as_dict(), pool.engine_options.as_dict())
    if spec.engine.kind is EngineKind.SIMULATED:
        options = render_simulated_options(
            options,
            model=spec.model.name,
            accelerator=spec.accelerator.profile,
            tensor_parallel_size=pool.tensor_parallel_size,
            offload=pool.kv_cache.offload,
        )
    if spec.engine.kind is EngineKind.REFERENCE:
        options = {**options, **render_offload_options(pool.kv_cache.offload)}
    ucx = spec.kv_transfer.ucx_transports
    # Every local process talks over loopback only: without this UCX also opens
    # connections on the host's other interfaces.
    env: tuple[tuple[str, str], ...] = (("UCX_NET_DEVICES", "lo"),)
    if ucx:
        env += (("UCX_TLS", ",".join(ucx)),)
    env += _tracing_env(cluster)
    return ProcessSpec(
        name=name,
        component=role.value,
        argv=(
            python, "-m", worker_module,
            "--role", role.value,
            "--worker-id", f"{cluster.metadata.name}-{name}",
            "--host", LOCAL_HOST,
            "--port", str(port),
            "--credentials", str(role_credentials_dir(state_dir, Identity.WORKER)),
            "--engine", spec.engine.kind.value,
            "--engine-options", json.dumps(options, sort_keys=True),
            *_tokenizer_flags(cluster),
            "--kv-backend", kv_backend or spec.kv_transfer.backend.value,
            "--kv-transfer-timeout-s", str(spec.kv_transfer.timeout_seconds),
            *(("--model-source", spec.model.source) if spec.model.source else ()),
        ),
        port=port,
        log=state_dir / "logs" / f"{name}.log",
        env=env,
    )  # fmt: skip


def _tracing_env(cluster: InferenceCluster) -> tuple[tuple[str, str], ...]:
    tracing = cluster.spec.observability.tracing
    return tuple(tracing_env(tracing.otlp_endpoint, tracing.sampling_ratio).items())


def _tokenizer_flags(cluster: InferenceCluster) -> tuple[str, ...]:
    """The tokenizer the spec selects, as the frontend selects it from the same spec."""
    choice = choose_tokenizer(cluster.spec.model, cluster.spec.engine.kind)
    flags: tuple[str, ...] = ("--tokenizer", choice.kind.value)
    return flags + (("--tokenizer-source", choice.source) if choice.source else ())


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _pool_spec(cluster: InferenceCluster, role: PoolRole) -> PoolSpec:
    return cluster.spec.prefill if role is PoolRole.PREFILL else cluster.spec.decode


def _dump(document: Mapping[str, Any]) -> str:
    return json.dumps(document, sort_keys=True, indent=2) + "\n"
