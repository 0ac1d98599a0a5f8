"""Pod templates of the frontend and the workers (pure).

The hardware parts come from ``profiles``; the command lines and config documents from
``contract``. What this module decides:

- probes: a startup probe sized for model loading, then readiness (``/readyz``, flips to
  false while draining) and liveness (``/healthz``);
- graceful drain: a ``preStop`` hook that runs in the container and asks the process on
  its admin socket to drain (it answers once in-flight requests are done; nothing on
  the network can), and a termination grace period long enough for the longest request;
- the cluster's credentials (``credentials.py``) mounted read-only for mutual TLS;
- a hardened container: frontends and CPU workers pass the Pod Security Standard
  "restricted" (non-root, no privilege escalation, all capabilities dropped,
  RuntimeDefault seccomp, read-only root filesystem, writable ``/tmp`` only); GPU
  workers run NVIDIA's images as root and add ``IPC_LOCK`` (pinned memory for RDMA) and
  a memory-backed ``/dev/shm`` (docs/security.md); no API credentials in workers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tandem.api.v1alpha1 import EngineKind, InferenceCluster, PoolRole
from tandem.engines.trtllm.version import PINNED_VERSION
from tandem.security.identity import Identity
from tandem.telemetry.tracing import tracing_env
from tandem_operator import names
from tandem_operator.render.contract import (
    api_key_directories,
    api_key_secrets,
    frontend_command,
    pool_spec,
    worker_command,
)
from tandem_operator.render.credentials import render_credentials_volume
from tandem_operator.render.model_source import ModelMount, render_model_mount
from tandem_operator.render.profiles import (
    HardwareOptions,
    WorkerHardware,
    get_profile,
    render_worker_hardware,
)
from tandem_operator.render.quantity import add_bytes

Manifest = dict[str, Any]

ANNOTATION_TRTLLM_RELEASE = "tandem.dev/tensorrt-llm-release"
TRTLLM_RELEASE = PINNED_VERSION

# Grace periods assume a stream produces at least this many tokens per second; a decode
# worker asked to stop finishes its longest admissible answer within the grace period.
MIN_STREAM_TOKENS_PER_SECOND = 20
GRACE_FLOOR_SECONDS = 60
GRACE_CEILING_SECONDS = 900
NON_ROOT_UID = 65532
PROFILED_CLUSTER_FILE = "cluster.json"  # in CONFIG_MOUNT_PATH of the profiling pod
DRAIN_COMMAND = ["python", "-m", "tandem.admin", "drain", "--socket", names.ADMIN_SOCKET]
CREDENTIALS_MOUNT = {
    "name": "credentials",
    "mountPath": names.CREDENTIALS_MOUNT_PATH,
    "readOnly": True,
}


@dataclass(frozen=True, slots=True)
class RenderSettings:
    """Operator-wide rendering inputs (from flags / chart values, never from env here)."""

    image: str = "ghcr.io/tandem-dev/tandem:0.1.0"  # frontend and reference workers
    trtllm_image: str = "ghcr.io/tandem-dev/tandem-trtllm:0.1.0"  # TensorRT-LLM workers
    # TensorRT-LLM workers of one accelerator profile ("gb200": ...), instead of trtllm_image.
    trtllm_images: Mapping[str, str] = field(default_factory=dict)
    image_pull_policy: str = "IfNotPresent"
    # imagePullSecrets of every frontend and worker pod (Secrets of the cluster's namespace).
    image_pull_secrets: tuple[str, ...] = ()
    frontend_resources: Manifest = field(
        default_factory=lambda: {
            "requests": {"cpu": "500m", "memory": "512Mi"},
            "limits": {"memory": "2Gi"},
        }
    )
    hardware: HardwareOptions = field(default_factory=HardwareOptions)
    # NetworkPolicyPeers that may scrape the workers' and frontends' /metrics (empty: only
    # the cluster's own pods, and the operator for the frontends).
    worker_metrics_from: tuple[Manifest, ...] = ()
    # The operator's own pods (they scrape the frontends' /metrics port): a
    # NetworkPolicyPeer, or None where the operator runs outside the cluster.
    operator_peer: Manifest | None = None


def clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def decode_grace_seconds(cr: InferenceCluster) -> int:
    """Long enough to finish the longest answer the model may give."""
    stream = math.ceil(cr.spec.model.max_output_tokens / MIN_STREAM_TOKENS_PER_SECOND)
    return clamp(30 + stream, GRACE_FLOOR_SECONDS, GRACE_CEILING_SECONDS)


def prefill_grace_seconds(cr: InferenceCluster) -> int:
    """A prefill worker holds KV until the decode side pulled it (bounded by the timeout)."""
    hold = math.ceil(cr.spec.kv_transfer.timeout_seconds)
    return clamp(30 + hold + 30, GRACE_FLOOR_SECONDS, GRACE_CEILING_SECONDS)


def grace_seconds(cr: InferenceCluster, component: str) -> int:
    if component == PoolRole.PREFILL.value:
        return prefill_grace_seconds(cr)
    return decode_grace_seconds(cr)  # decode workers and the frontend relay whole streams


def worker_image(cr: InferenceCluster, settings: RenderSettings) -> str:
    """The cluster's own pin (spec.engine.image), else the operator's image for its engine
    and accelerator profile."""
    if cr.spec.engine.image:
        return cr.spec.engine.image
    if cr.spec.engine.kind is EngineKind.TRTLLM:
        profile = cr.spec.accelerator.profile
        return settings.trtllm_images.get(profile, settings.trtllm_image)
    return settings.image


def frontend_image(cr: InferenceCluster, settings: RenderSettings) -> str:
    """The cluster's own pin (spec.frontend.image), else the operator's image."""
    return cr.spec.frontend.image or settings.image


def merge_pod_spec(base: Manifest, override: Manifest) -> Manifest:
    """Strategic-merge-style overlay: maps merge, named lists merge by ``name``."""
    out = dict(base)
    for key, value in override.items():
        current = out.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            out[key] = merge_pod_spec(current, value)
        elif isinstance(value, list) and isinstance(current, list) and _named(value + current):
            merged = {item["name"]: item for item in current}
            for item in value:
                prior = merged.get(item["name"])
                merged[item["name"]] = merge_pod_spec(prior, item) if prior else item
            out[key] = list(merged.values())
        else:
            out[key] = value
    return out


def _named(items: list[Any]) -> bool:
    return all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items)


def _downward_env(*fields: tuple[str, str]) -> list[Manifest]:
    return [{"name": n, "valueFrom": {"fieldRef": {"fieldPath": p}}} for n, p in fields]


def _tracing_env(cr: InferenceCluster) -> list[Manifest]:
    """OTLP export for the frontend and workers, when the spec asks for it."""
    tracing = cr.spec.observability.tracing
    env = tracing_env(tracing.otlp_endpoint, tracing.sampling_ratio)
    return [{"name": name, "value": value} for name, value in env.items()]


def _security_context(non_root: bool, add_capabilities: tuple[str, ...] = ()) -> Manifest:
    ctx: Manifest = {"allowPrivilegeEscalation": False}
    if non_root:
        ctx |= {
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": NON_ROOT_UID,
            "capabilities": {"drop": ["ALL"]},
        }
    if add_capabilities:
        capabilities = ctx.setdefault("capabilities", {})
        capabilities["add"] = list(add_capabilities)
    return ctx


def _probes(port: str, startup_budget_seconds: int) -> Manifest:
    period = 5
    return {
        "startupProbe": {
            "httpGet": {"path": "/healthz", "port": port},
            "periodSeconds": period,
            "failureThreshold": max(1, startup_budget_seconds // period),
        },
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": port},
            "periodSeconds": period,
            "failureThreshold": 2,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": port},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        # Runs in the container: the admin socket is not reachable from anywhere else.
        "lifecycle": {"preStop": {"exec": {"command": DRAIN_COMMAND}}},
    }


def _config_volume(cr: InferenceCluster, component: str) -> Manifest:
    key = names.config_key(component)
    return {
        "name": "config",
        "configMap": {
            "name": names.config_map_name(cr.metadata.name),
            "items": [{"key": key, "path": key}],
        },
    }


def _spread(selector: dict[str, str], max_skew: int = 1) -> list[Manifest]:
    return [
        {
            "maxSkew": max_skew,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector},
        }
    ]


def _pod_spec(
    *,
    container: Manifest,
    volumes: list[Manifest],
    grace: int,
    selector: dict[str, str],
    hardware: WorkerHardware | None,
    pull_secrets: tuple[str, ...],
) -> Manifest:
    spec: Manifest = {
        # Workers never call the API; the frontend opts back in (see access.py).
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": grace,
        "containers": [container],
        "volumes": volumes,
        "topologySpreadConstraints": _spread(selector, hardware.spread_max_skew if hardware else 1),
    }
    if pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in pull_secrets]
    non_root = hardware.non_root if hardware else True
    spec["securityContext"] = {"seccompProfile": {"type": "RuntimeDefault"}}
    if non_root:
        # fsGroup: the mounted credentials (mode 0440) are readable by the pod's group.
        spec["securityContext"] |= {"runAsNonRoot": True, "fsGroup": NON_ROOT_UID}
    if hardware:
        if hardware.node_selector:
            spec["nodeSelector"] = hardware.node_selector
        if hardware.affinity:
            spec["affinity"] = hardware.affinity
        if hardware.tolerations:
            spec["tolerations"] = hardware.tolerations
        if hardware.resource_claims:
            spec["resourceClaims"] = hardware.resource_claims
    return spec


@dataclass(frozen=True, slots=True)
class _WorkerParts:
    """What a pool's node class decides about a worker's pod: hardware, weights, env."""

    hardware: WorkerHardware
    model: ModelMount | None
    env: list[Manifest]

    @property
    def volumes(self) -> list[Manifest]:
        model = self.model.volumes if self.model else []
        return [{"name": "tmp", "emptyDir": {}}, *self.hardware.volumes, *model]

    def container(
        self,
        cr: InferenceCluster,
        settings: RenderSettings,
        *,
        command: list[str],
        mounts: list[Manifest],
        ports: list[Manifest] | None = None,
    ) -> Manifest:
        """The worker container running ``command``, with ``mounts`` before its own."""
        hardware, model = self.hardware, self.model
        container: Manifest = {
            "name": "worker",
            "image": worker_image(cr, settings),
            "imagePullPolicy": settings.image_pull_policy,
            "command": command,
        }
        if ports:
            container["ports"] = ports
        return container | {
            "env": self.env,
            "resources": _with_claims(hardware.resources, hardware.container_claims),
            "volumeMounts": [
                *mounts,
                {"name": "tmp", "mountPath": "/tmp"},
                *hardware.volume_mounts,
                *(model.volume_mounts if model else ()),
            ],
            "securityContext": _security_context(hardware.non_root, hardware.capabilities),
        }


def _worker_parts(cr: InferenceCluster, role: PoolRole, settings: RenderSettings) -> _WorkerParts:
    pool = pool_spec(cr, role)
    hardware = render_worker_hardware(
        cr.spec.accelerator.profile,
        pool,
        cr.spec.kv_transfer,
        cluster=cr.metadata.name,
        role=role,
        options=settings.hardware,
    )
    offload = pool.kv_cache.offload
    # Only the reference engine writes a disk tier (the simulated engine models one).
    writes_disk = cr.spec.engine.kind is EngineKind.REFERENCE
    if offload.enabled and offload.disk_bytes and writes_disk:
        # The disk tier's file lives on the node's local ephemeral storage, capped at
        # its budget (the kubelet evicts a pod past sizeLimit; the tier stays within it).
        hardware = replace(
            hardware,
            volumes=[
                *hardware.volumes,
                {"name": "kv-offload", "emptyDir": {"sizeLimit": str(offload.disk_bytes)}},
            ],
            volume_mounts=[
                *hardware.volume_mounts,
                {"name": "kv-offload", "mountPath": offload.disk_path},
            ],
        )
    if offload.enabled and offload.host_bytes and cr.spec.engine.kind is not EngineKind.SIMULATED:
        # The host tier lives in the worker's own memory (the reference engine's arrays,
        # TensorRT-LLM's pinned secondary pool, both allocated at start-up): the scheduler
        # must place the pod where it fits, and a memory limit must not OOM-kill it.
        hardware = replace(
            hardware, resources=with_host_tier(hardware.resources, offload.host_bytes)
        )
    # Engines that load weights mount them (the reference engine builds its own).
    model = render_model_mount(cr.spec.model) if cr.spec.engine.kind is EngineKind.TRTLLM else None
    env = _downward_env(
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
        ("POD_IP", "status.podIP"),
    )
    env += hardware.env
    env += _tracing_env(cr)
    env += [e.to_wire() for e in pool.env]
    return _WorkerParts(hardware, model, env)


def _with_overlay(cr: InferenceCluster, role: PoolRole, spec: Manifest) -> Manifest:
    """``spec`` under the pool's own pod template (``podTemplate.spec``), if any."""
    overlay = pool_spec(cr, role).pod_template.spec
    return spec if overlay is None else merge_pod_spec(spec, overlay.as_dict())


def render_worker_pod_template(
    cr: InferenceCluster, role: PoolRole, settings: RenderSettings, config_hash: str
) -> Manifest:
    """The PodTemplateSpec of one pool's workers."""
    cluster = cr.metadata.name
    pool = pool_spec(cr, role)
    parts = _worker_parts(cr, role, settings)
    startup_budget = 900 if get_profile(cr.spec.accelerator.profile).has_gpus else 300
    container = parts.container(
        cr,
        settings,
        command=worker_command(role),
        mounts=[
            {"name": "config", "mountPath": names.CONFIG_MOUNT_PATH, "readOnly": True},
            CREDENTIALS_MOUNT,
        ],
        ports=[
            {
                "name": names.WORKER_GRPC_PORT_NAME,
                "containerPort": names.WORKER_GRPC_PORT,
                "protocol": "TCP",
            },
            {"name": "http", "containerPort": names.WORKER_HTTP_PORT, "protocol": "TCP"},
        ],
    ) | _probes("http", startup_budget)
    volumes = [
        _config_volume(cr, role.value),
        render_credentials_volume(cluster, Identity.WORKER),
        *parts.volumes,
    ]
    selector = names.selector_labels(cluster, role.value)
    spec = _pod_spec(
        container=container,
        volumes=volumes,
        grace=grace_seconds(cr, role.value),
        selector=selector,
        hardware=parts.hardware,
        pull_secrets=settings.image_pull_secrets,
    )
    spec = _with_overlay(cr, role, spec)
    labels = {**pool.pod_template.labels, **names.standard_labels(cluster, role.value)}
    annotations = {**pool.pod_template.annotations, names.ANNOTATION_CONFIG_HASH: config_hash}
    if cr.spec.engine.kind is EngineKind.TRTLLM:
        # The release the engine options are rendered for; both pools must run it.
        annotations[ANNOTATION_TRTLLM_RELEASE] = TRTLLM_RELEASE
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec}


def with_host_tier(resources: Manifest, host_bytes: int) -> Manifest:
    """``resources`` with ``host_bytes`` more memory: added to the memory request (the
    tier alone when none was asked) and to a memory limit, where one is set."""
    requests = dict(resources.get("requests", {}))
    requests["memory"] = add_bytes(requests.get("memory", "0"), host_bytes)
    out: Manifest = {**resources, "requests": requests}
    limits = resources.get("limits", {})
    if "memory" in limits:
        out["limits"] = {**limits, "memory": add_bytes(limits["memory"], host_bytes)}
    return out


def _with_claims(resources: Manifest, claims: list[Manifest]) -> Manifest:
    return {**resources, "claims": claims} if claims else resources


def render_profile_pod_template(
    cr: InferenceCluster,
    settings: RenderSettings,
    command: list[str],
    cluster_document: str,
    labels: dict[str, str],
) -> Manifest:
    """The pod of the cluster's profiling Job: a decode worker's image, node selector,
    tolerations, resources, env, model source and pod template overlay, so that it
    measures the node class the decode workers run on. ``cluster_document`` (what
    ``command`` reads) is a file projected from the pod's own annotation."""
    role = PoolRole.DECODE
    parts = _worker_parts(cr, role, settings)
    container = parts.container(
        cr,
        settings,
        command=command,
        mounts=[{"name": "cluster", "mountPath": names.CONFIG_MOUNT_PATH, "readOnly": True}],
    )
    # A failed run's last log lines become its termination message, so the operator can
    # say why; a finished run's message is the table it wrote to terminationMessagePath
    # (/dev/termination-log by default).
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    cluster_file = {
        "path": PROFILED_CLUSTER_FILE,
        "fieldRef": {"fieldPath": f"metadata.annotations['{names.ANNOTATION_PROFILED_CLUSTER}']"},
    }
    volumes = [{"name": "cluster", "downwardAPI": {"items": [cluster_file]}}, *parts.volumes]
    spec = _pod_spec(
        container=container,
        volumes=volumes,
        grace=GRACE_FLOOR_SECONDS,
        selector=labels,
        hardware=parts.hardware,
        pull_secrets=settings.image_pull_secrets,
    )
    spec["restartPolicy"] = "Never"  # a failed run is the Job's to retry (backoffLimit)
    return {
        "metadata": {
            "labels": labels,
            "annotations": {names.ANNOTATION_PROFILED_CLUSTER: cluster_document},
        },
        "spec": _with_overlay(cr, role, spec),
    }


def render_api_key_volumes(cr: InferenceCluster) -> tuple[list[Manifest], list[Manifest]]:
    """(volumes, mounts) of the frontend's API key Secrets: one whole-Secret volume each
    (no subPath, so the kubelet updates the files in place and added or revoked keys
    reach a running frontend), optional (a Secret not created yet holds no keys), read
    only. None when keys are not required."""
    if not cr.spec.frontend.api_keys.required:
        return [], []
    volumes: list[Manifest] = []
    mounts: list[Manifest] = []
    pairs = zip(api_key_secrets(cr), api_key_directories(cr), strict=True)
    for index, (secret, directory) in enumerate(pairs):
        name = f"api-keys-{index}"
        volumes.append(
            {
                "name": name,
                "secret": {"secretName": secret, "optional": True, "defaultMode": 0o440},
            }
        )
        mounts.append({"name": name, "mountPath": directory, "readOnly": True})
    return volumes, mounts


def render_frontend_pod_template(
    cr: InferenceCluster, settings: RenderSettings, config_hash: str
) -> Manifest:
    cluster = cr.metadata.name
    port = cr.spec.frontend.port
    key_volumes, key_mounts = render_api_key_volumes(cr)
    container: Manifest = {
        "name": "frontend",
        "image": frontend_image(cr, settings),
        "imagePullPolicy": settings.image_pull_policy,
        "command": frontend_command(port),
        "ports": [
            {"name": "http", "containerPort": port, "protocol": "TCP"},
            {
                "name": names.FRONTEND_METRICS_PORT_NAME,
                "containerPort": names.FRONTEND_METRICS_PORT,
                "protocol": "TCP",
            },
        ],
        "env": [
            *_downward_env(("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace")),
            *_tracing_env(cr),
        ],
        "resources": settings.frontend_resources,
        "volumeMounts": [
            {"name": "config", "mountPath": names.CONFIG_MOUNT_PATH, "readOnly": True},
            CREDENTIALS_MOUNT,
            *key_mounts,
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": _security_context(non_root=True),
        **_probes("http", startup_budget_seconds=120),
    }
    volumes = [
        _config_volume(cr, names.FRONTEND),
        render_credentials_volume(cluster, Identity.FRONTEND),
        *key_volumes,
        {"name": "tmp", "emptyDir": {}},
    ]
    selector = names.selector_labels(cluster, names.FRONTEND)
    spec = _pod_spec(
        container=container,
        volumes=volumes,
        grace=grace_seconds(cr, names.FRONTEND),
        selector=selector,
        hardware=None,
        pull_secrets=settings.image_pull_secrets,
    )
    # The frontend watches its pools' EndpointSlices with its own, narrow identity.
    spec["serviceAccountName"] = names.frontend_name(cluster)
    spec["automountServiceAccountToken"] = True
    return {
        "metadata": {
            "labels": names.standard_labels(cluster, names.FRONTEND),
            "annotations": {names.ANNOTATION_CONFIG_HASH: config_hash},
        },
        "spec": spec,
    }
