"""The contract between the operator and the data-plane pods.

Each process gets a short command line and one JSON document (mounted from the cluster's
ConfigMap at ``/etc/tandem/<component>.json``). Both are golden-tested
(tests/unit/operator/golden/), because the worker and frontend parse exactly this:

- worker:   ``python -m tandem.worker --role R --config /etc/tandem/R.json --host $(POD_IP)
            --port 50051 --http-port 9090 --credentials DIR --admin-socket SOCK``; gRPC
            (mutual TLS) on the pod IP only, ``/healthz``, ``/readyz``, ``/metrics`` on
            ``--http-port``, ``/drain`` on the admin socket (the preStop hook).
- frontend: ``python -m tandem.frontend --config /etc/tandem/frontend.json --host 0.0.0.0
            --port P --credentials DIR --admin-socket SOCK``; OpenAI API plus
            ``/healthz``, ``/readyz`` on ``--port``, ``/metrics`` alone on the document's
            ``metricsPort`` (9091), ``/drain`` on the admin socket. API keys: the
            document's ``apiKeys.directories``, the key Secrets mounted read-only (as
            volumes, so the kubelet refreshes them and keys change without a restart).

``DIR`` is the cluster's credentials Secret (``credentials.py``); ``SOCK`` a Unix socket
in the pod's own ``/tmp``: draining is never reachable over the network.

A document only carries what its reader needs, so that changing one pool's size or
engine options rolls only the pods that read the changed document (each pod template
carries the hash of its own document).

For the ``trtllm`` engine, ``engine.options`` is exactly what the worker's engine takes
(``tandem.engines.trtllm.TrtllmEngineOptions``): the model path inside the pod, the role
and ``llm_args`` = ``render_trtllm_config(cluster, role)``, the TensorRT-LLM LLM API options
rendered from the spec (validated here, so a bad option fails the reconcile instead of a
GPU pod's start). For ``reference`` it is the merged spec options.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tandem.api.v1alpha1 import (
    EngineKind,
    InferenceCluster,
    PoolRole,
    PoolSpec,
)
from tandem.engines.reference.spec_options import render_offload_options
from tandem.engines.simulated.config import render_simulated_options
from tandem.engines.trtllm.config import render_trtllm_config
from tandem.frontend import api_keys
from tandem.frontend.config import cold_start_timeout, tenancy_settings
from tandem_operator import names
from tandem_operator.render.model_source import render_model_mount

Manifest = dict[str, Any]

CONTRACT_VERSION = 1


def pool_spec(cr: InferenceCluster, role: PoolRole) -> PoolSpec:
    return cr.spec.prefill if role is PoolRole.PREFILL else cr.spec.decode


def merge_options(base: Manifest, override: Manifest) -> Manifest:
    """Pool engine options over cluster engine options; nested mappings merge."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_options(out[key], value)
        else:
            out[key] = value
    return out


def render_engine_options(cr: InferenceCluster, role: PoolRole) -> Manifest:
    """The options the worker hands its engine (see the module docstring).

    Raises ``TrtllmConfigError`` / ``ModelSourceError`` (both ValueError) for a spec the
    engine cannot run."""
    spec = cr.spec
    if spec.engine.kind is EngineKind.TRTLLM:
        return {
            "model": render_model_mount(spec.model).path,
            "model_name": spec.model.name,
            "role": role.value,
            "llm_args": render_trtllm_config(cr, role),
        }
    pool = pool_spec(cr, role)
    options = merge_options(spec.engine.options.as_dict(), pool.engine_options.as_dict())
    if spec.engine.kind is EngineKind.SIMULATED:
        return render_simulated_options(
            options,
            model=spec.model.name,
            accelerator=spec.accelerator.profile,
            tensor_parallel_size=pool.tensor_parallel_size,
            offload=pool.kv_cache.offload,
        )
    rendered = {**options, **render_offload_options(pool.kv_cache.offload)}
    if pool.tensor_parallel_size > 1:  # one rank per pod of the worker's Ray group
        rendered["tensor_parallel_size"] = pool.tensor_parallel_size
    return rendered


def render_worker_config(cr: InferenceCluster, role: PoolRole) -> Manifest:
    """What one worker of ``role`` needs: model, engine, parallelism, KV transfer."""
    spec = cr.spec
    pool = pool_spec(cr, role)
    return {
        "contractVersion": CONTRACT_VERSION,
        "cluster": cr.metadata.name,
        "role": role.value,
        "model": spec.model.to_wire(),
        "engine": {"kind": spec.engine.kind.value, "options": render_engine_options(cr, role)},
        "parallelism": {
            "tensorParallelSize": pool.tensor_parallel_size,
            "expertParallelSize": pool.expert_parallel_size,
            "nodesPerWorker": pool.nodes_per_worker,
        },
        "accelerator": spec.accelerator.profile.value,
        "kvTransfer": spec.kv_transfer.to_wire(),
    }


def api_key_secrets(cr: InferenceCluster) -> list[str]:
    """The Secrets the frontend reads keys from, in mount order: the cluster's own
    (``tandem keys``), then ``spec.frontend.apiKeys.secrets``."""
    own = api_keys.secret_name(cr.metadata.name)
    return [own, *(s for s in cr.spec.frontend.api_keys.secrets if s != own)]


def api_key_directories(cr: InferenceCluster) -> list[str]:
    """Where each of :func:`api_key_secrets` is mounted in the frontend pod."""
    return [f"{names.API_KEYS_MOUNT_ROOT}/{i}" for i in range(len(api_key_secrets(cr)))]


def render_api_keys(cr: InferenceCluster) -> Manifest:
    """The document's ``apiKeys``: the mounted key Secrets, or an explicit
    ``required: false`` (keyless on purpose, behind an authenticating gateway)."""
    if not cr.spec.frontend.api_keys.required:
        return {"required": False}
    return {"required": True, "directories": api_key_directories(cr)}


def render_frontend_config(cr: InferenceCluster) -> Manifest:
    """What the frontend needs: model limits, routing, tenants, where the workers are,
    its API keys and its metrics port (in a cluster /metrics is never on the API port)."""
    spec = cr.spec
    namespace = cr.metadata.namespace or "default"
    frontend: Manifest = {
        "routingPolicy": spec.frontend.routing_policy.value,
        "disaggregation": spec.frontend.disaggregation.to_wire(),
        "maxQueuedRequests": spec.frontend.max_queued_requests,
        "tenancy": tenancy_settings(spec.frontend).model_dump(
            mode="json", by_alias=True, exclude_none=True
        ),
    }
    if (timeout := cold_start_timeout(spec)) is not None:
        frontend["coldStartTimeoutSeconds"] = timeout
    return {
        "contractVersion": CONTRACT_VERSION,
        "cluster": cr.metadata.name,
        "model": spec.model.to_wire(),
        "servedModelName": spec.model.public_name,
        "frontend": frontend,
        "workers": {
            role.value: names.worker_address(cr.metadata.name, namespace, role) for role in PoolRole
        },
        "kvTransferTimeoutSeconds": spec.kv_transfer.timeout_seconds,
        "apiKeys": render_api_keys(cr),
        "metricsPort": names.FRONTEND_METRICS_PORT,
    }


def dump_config(document: Manifest) -> str:
    """Canonical JSON: stable key order, so equal configs hash equal."""
    return json.dumps(document, sort_keys=True, indent=2) + "\n"


def config_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def worker_command(role: PoolRole) -> list[str]:
    return [
        "python",
        "-m",
        "tandem.worker",
        "--role",
        role.value,
        "--config",
        f"{names.CONFIG_MOUNT_PATH}/{names.config_key(role.value)}",
        # Kubernetes expands $(POD_IP) from the container's env (the downward API).
        "--host",
        "$(POD_IP)",
        "--port",
        str(names.WORKER_GRPC_PORT),
        "--http-port",
        str(names.WORKER_HTTP_PORT),
        "--credentials",
        names.CREDENTIALS_MOUNT_PATH,
        "--admin-socket",
        names.ADMIN_SOCKET,
    ]


def frontend_command(port: int) -> list[str]:
    return [
        "python",
        "-m",
        "tandem.frontend",
        "--config",
        f"{names.CONFIG_MOUNT_PATH}/{names.config_key(names.FRONTEND)}",
        "--host",
        "0.0.0.0",
        "--port",
        str(port),
        "--credentials",
        names.CREDENTIALS_MOUNT_PATH,
        "--admin-socket",
        names.ADMIN_SOCKET,
    ]
