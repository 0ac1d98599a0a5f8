"""The ``tandem.dev/v1alpha1`` API: InferenceCluster and WorkerPool, defined once.

Everything else derives from these models: the CRDs (``tandem crds``), ``tandem validate``,
the local runtime (``tandem up``) and the operator's renderers. Field docstrings become the
CRD descriptions, so write them for the person reading ``kubectl explain``.
"""

from __future__ import annotations

import enum
from typing import Annotated, ClassVar

from pydantic import Field

from tandem.api.base import ApiModel, CelRule, OpenObject

GROUP = "tandem.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# Kubernetes names (RFC 1123 label): what a cluster name becomes inside child names.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

Quantity = Annotated[
    int | str,
    Field(description='A Kubernetes resource quantity, e.g. 2, "500m" or "16Gi".'),
]


class EngineKind(enum.StrEnum):
    REFERENCE = "reference"  # numpy transformer on CPU: tests, laptops, CI
    SIMULATED = "simulated"  # real token ids, a GPU-calibrated clock: goodput studies
    TRTLLM = "trtllm"  # TensorRT-LLM on NVIDIA GPUs


class TokenizerKind(enum.StrEnum):
    GGUF = "gguf"  # the tokenizer and chat template inside a .gguf model file
    HARMONY = "harmony"  # gpt-oss: openai-harmony over the o200k vocabulary
    BYTE = "byte"  # UTF-8 bytes + chat markers: the reference engine's random test model


class AcceleratorProfile(enum.StrEnum):
    CPU = "cpu"
    GB200 = "gb200"
    B200 = "b200"
    H200 = "h200"
    H100 = "h100"


class RoutingPolicy(enum.StrEnum):
    KV_AWARE = "kv-aware"  # prefix overlap against load (default)
    LEAST_LOADED = "least-loaded"
    ROUND_ROBIN = "round-robin"


class MultiNodeLauncher(enum.StrEnum):
    """How the ranks of a worker that spans nodes start (``nodesPerWorker > 1``)."""

    RAY = "ray"  # a Ray cluster per group; the engine places its ranks (tandem.worker.ray_launch)
    MPI = "mpi"  # one MPI world per group, over SSH (TensorRT-LLM only; tandem.worker.mpi_launch)


class KvBackend(enum.StrEnum):
    NIXL = "nixl"
    TCP = "tcp"


class NixlBackend(enum.StrEnum):
    UCX = "UCX"
    LIBFABRIC = "LIBFABRIC"


class AutoscalingMode(enum.StrEnum):
    BUILTIN = "builtin"  # Tandem's autoscaler writes WorkerPool /scale
    EXTERNAL = "external"  # HPA/KEDA own the WorkerPool /scale; Tandem never touches replicas


class PoolRole(enum.StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"


class PlanningMode(enum.StrEnum):
    OFF = "off"  # the hand-written shape, no prediction
    CHECK = "check"  # predict the hand-written shape against the SLO, change nothing
    AUTO = "auto"  # plan the shape for the SLO and workload, and deploy it


class PlanOutcome(enum.StrEnum):
    MET = "met"  # auto: a deployment meets the SLO; check: the spec's shape does
    MISSED = "missed"  # auto: none within the spec's limits does; check: the shape misses
    FAILED = "failed"  # no answer: the spec cannot be planned, or planning gave up


class WorkloadSource(enum.StrEnum):
    SPEC = "spec"  # spec.workload as written
    OBSERVED = "observed"  # what the frontends measured, once it left spec.workload's envelope


# --------------------------------------------------------------------------- spec parts


class ModelSpec(ApiModel):
    """The model to serve."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "!has(self.tokenizer) || self.tokenizer != 'gguf' || "
            "(has(self.source) && self.source.endsWith('.gguf'))",
            "tokenizer gguf reads the tokenizer inside the model file: model.source must "
            "name a .gguf file",
            ".tokenizer",
        ),
    )

    # Lengths are bounded so the API server can cost the CEL rules that read them.
    name: str = Field(
        min_length=1, max_length=256, description="Model identifier, e.g. openai/gpt-oss-120b."
    )
    source: str | None = Field(
        default=None,
        max_length=1024,
        description="Where the weights come from. trtllm: pvc://CLAIM/PATH (the claim "
        "mounted read-only at /models), an absolute path inside the image, or hf://ORG/NAME "
        "(TensorRT-LLM downloads it at start; a gated model needs HF_TOKEN in prefill.env "
        "and decode.env, from a Secret with valueFrom.secretKeyRef); anything else, s3:// "
        "included, is refused (InvalidSpec): stage such weights on a PVC. Reference engine: "
        "pkg://MODULE/PATH (a file inside an installed Python package: locally, or in the "
        "Tandem image, which ships SmolLM2's) or an absolute path. A .gguf file carries its "
        "own tokenizer. Not needed for the reference engine's random model.",
    )
    tokenizer: TokenizerKind | None = Field(
        default=None,
        description="gguf, harmony or byte; the frontend and every worker use it. Unset: "
        "gguf when source is a .gguf file, else harmony when name contains gpt-oss, else "
        "byte for the reference engine (its random test model).",
    )
    served_name: str | None = Field(
        default=None,
        description="Name clients put in the `model` field; defaults to `name`.",
    )
    max_input_tokens: int = Field(
        default=32768, ge=1, le=1_048_576, description="Longest accepted prompt, in tokens."
    )
    max_output_tokens: int = Field(
        default=4096, ge=1, le=1_048_576, description="Most tokens one request may generate."
    )

    @property
    def public_name(self) -> str:
        return self.served_name or self.name


class EngineSpec(ApiModel):
    """The runtime that executes the model inside each worker."""

    kind: EngineKind = Field(
        default=EngineKind.REFERENCE,
        description="reference (a CPU transformer), simulated (real token ids with a "
        "GPU-calibrated clock, docs/simulated-engine.md) or trtllm.",
    )
    image: str | None = Field(
        default=None,
        description="Worker container image, pinned for this cluster. Unset: the operator's "
        "image for the engine and accelerator profile (chart values dataPlane.image, "
        "dataPlane.trtllmImage, dataPlane.trtllmImageByProfile), so an upgrade of the "
        "operator's images rolls this cluster's workers too.",
    )
    options: OpenObject = Field(
        default_factory=OpenObject,
        description="Engine options passed through to the engine (for trtllm: LLM API "
        "arguments; for reference: model shape and seed; for simulated: the modelled "
        "GPU, parallelism, speedup and an optional measured table).",
    )


class AcceleratorSpec(ApiModel):
    """The hardware the workers run on; selects resources, node placement and environment."""

    profile: AcceleratorProfile = Field(
        default=AcceleratorProfile.CPU, description="cpu, gb200, b200, h200 or h100."
    )


class DisaggregationSpec(ApiModel):
    """When a request is worth sending to the prefill pool."""

    min_prefill_tokens: int = Field(
        default=512,
        ge=0,
        description="Prompts with fewer uncached tokens than this prefill locally on the "
        "decode worker instead of moving KV.",
    )
    max_prefill_wait_seconds: float | None = Field(
        default=None,
        gt=0,
        le=3600,
        description="The longest a long prompt may take on the prefill pool, its queue "
        "included (queued tokens over each worker's measured prefill rate); when every "
        "prefill worker would take longer, it is prefilled on its decode worker instead, "
        "if that worker streams nothing and has no local prefill pending (a local prefill "
        "stalls its streams); otherwise it queues on the prefill worker that "
        "finishes first. Set it to the time-to-first-token target. Unset: a prefill "
        "worker with four maximal prompts queued is full.",
    )
    max_prefill_start_wait_seconds: float | None = Field(
        default=None,
        gt=0,
        le=3600,
        description="How long a long prompt may wait for a prefill worker that is "
        "starting (a pod not ready yet) when none is ready and its decode worker streams, "
        "instead of prefilling there and stalling those streams; past it, it prefills on "
        "the decode worker. Worth about one worker start when the prefill pool scales "
        "from zero. Unset: prompts never wait.",
    )


# A Secret's name (RFC 1123 subdomain).
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
SecretName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]
MAX_KEY_SECRETS = 16
MAX_TENANTS = 64
# In a Kubernetes cluster the frontend serves /metrics on this port alone (for the
# operator and the scrapers its NetworkPolicy names), never on spec.frontend.port.
FRONTEND_METRICS_PORT = 9091


class ApiKeysSpec(ApiModel):
    """Who may call the frontend's API: ``Authorization: Bearer <key>``."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "!has(self.secrets) || self.secrets.all(s, self.secrets.exists_one(t, t == s))",
            "apiKeys.secrets must not name a Secret twice",
            ".secrets",
        ),
    )

    required: bool = Field(
        default=True,
        description="Whether every API request needs a key. Keys are stored hashed (SHA-256) "
        "in Secrets: the cluster's own `<cluster>-api-keys` Secret, which `tandem keys "
        "add|list|revoke` manages, and those named in secrets; a key added or revoked there "
        "takes effect within seconds, without restarting a frontend. false: anyone who can "
        "reach the frontend can use it; only for a cluster behind a gateway that "
        "authenticates its callers.",
    )
    secrets: list[SecretName] = Field(
        default_factory=list,
        max_length=MAX_KEY_SECRETS,
        description="Further Secrets in the cluster's namespace holding key records (one "
        "item per key: the key id, and the JSON record with its tenant and SHA-256), read "
        "besides `<cluster>-api-keys`; e.g. keys a platform provisions. A Secret that does "
        "not exist holds no keys. At most 16, each named once.",
    )


class TenantLimitsSpec(ApiModel):
    """One tenant's share of the frontend and its limits (unset: unlimited)."""

    weight: int = Field(
        default=1,
        ge=1,
        le=1000,
        description="Share of the frontend when it is busy: waiting requests are sent on, "
        "and a full queue is shared, in proportion to the weights of the tenants waiting.",
    )
    max_in_flight_requests: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="Requests of the tenant admitted at once, per frontend; beyond it the "
        "frontend answers 429 with Retry-After. Unset: unlimited.",
    )
    tokens_per_minute: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000_000,
        description="Prompt and completion tokens the tenant may use per minute, per "
        "frontend (a request reserves its prompt plus max_tokens when admitted and gives "
        "back what it did not use); beyond it the frontend answers 429 with Retry-After. "
        "Unset: unlimited.",
    )


class TenantSpec(TenantLimitsSpec):
    """A tenant named by the API keys' records, and its limits."""

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=DNS_LABEL,
        description="The tenant's name, as API key records carry it.",
    )


class FrontendSpec(ApiModel):
    """The OpenAI-compatible HTTP frontend and its router."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            f"self.port != {FRONTEND_METRICS_PORT}",
            f"port {FRONTEND_METRICS_PORT} is the frontend's metrics port: choose another",
            ".port",
        ),
        CelRule(
            "!has(self.tenants) || "
            "self.tenants.all(t, self.tenants.exists_one(u, u.name == t.name))",
            "tenants must not name a tenant twice",
            ".tenants",
        ),
    )

    replicas: int = Field(default=1, ge=1, le=100, description="Frontend replicas.")
    image: str | None = Field(
        default=None,
        description="Frontend container image, pinned for this cluster. Unset: the "
        "operator's image (chart value dataPlane.image), so an upgrade of the operator's "
        "images rolls this cluster's frontends too.",
    )
    port: int = Field(default=8000, ge=1, le=65535, description="HTTP port of the frontend.")
    routing_policy: RoutingPolicy = Field(
        default=RoutingPolicy.KV_AWARE, description="How decode workers are chosen."
    )
    disaggregation: DisaggregationSpec = Field(default_factory=DisaggregationSpec)
    max_queued_requests: int = Field(
        default=256,
        ge=1,
        description="Requests admitted but not yet running, per frontend; beyond it the "
        "frontend answers 429 with Retry-After.",
    )
    cold_start_timeout_seconds: int = Field(
        default=300,
        ge=1,
        le=3600,
        description="With decode.minReplicas 0: how long a request waits for a decode "
        "worker while none is ready (the pool scaled to zero and the autoscaler starting "
        "one); it is answered once one is. Past it the frontend answers 503 with "
        "Retry-After, saying no worker started in time. Set it above the workers' cold "
        "start (pod scheduled, image present, model loaded). Unused while the decode pool "
        "keeps a worker.",
    )
    max_migrations: int = Field(
        default=2,
        ge=0,
        le=10,
        description="How often one stream may move to another decode worker when its own "
        "fails after the first token (it goes on from the tokens already sent); 0: such a "
        "stream ends with an error.",
    )
    api_keys: ApiKeysSpec = Field(
        default_factory=ApiKeysSpec,
        description="API keys: on by default; each key belongs to a tenant.",
    )
    tenants: list[TenantSpec] = Field(
        default_factory=list,
        max_length=MAX_TENANTS,
        description="Tenants with their own weight and limits (at most 64, each named "
        "once); every other tenant gets tenantDefaults.",
    )
    tenant_defaults: TenantLimitsSpec = Field(
        default_factory=TenantLimitsSpec,
        description="The weight and limits of every tenant not listed in tenants.",
    )


class Toleration(ApiModel):
    key: str | None = None
    operator: str | None = Field(default=None, pattern=r"^(Exists|Equal)$")
    value: str | None = None
    effect: str | None = Field(default=None, pattern=r"^(NoSchedule|PreferNoSchedule|NoExecute)$")
    toleration_seconds: int | None = None


class EnvVar(ApiModel):
    name: str = Field(min_length=1)
    value: str | None = None
    value_from: OpenObject | None = Field(default=None, description="As in a Pod's env.")


class ResourceRequirements(ApiModel):
    requests: dict[str, Quantity] = Field(default_factory=dict)
    limits: dict[str, Quantity] = Field(default_factory=dict)


class PodTemplateOverrides(ApiModel):
    """Last-word changes to the rendered worker pods."""

    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    spec: OpenObject | None = Field(
        default=None, description="Merged over the rendered PodSpec (strategic-merge style)."
    )


class KvOffloadSpec(ApiModel):
    """KV tiers below the device pool: evicted blocks go to host memory, then local disk."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "!self.enabled || self.hostBytes > 0 || self.diskBytes > 0",
            "an enabled offload needs hostBytes or diskBytes",
            ".enabled",
        ),
        CelRule(
            "self.diskBytes == 0 || self.diskPath != ''",
            "diskBytes needs diskPath",
            ".diskPath",
        ),
    )

    enabled: bool = Field(default=False, description="Offload evicted KV blocks.")
    host_bytes: int = Field(
        default=0,
        ge=0,
        description="Host-memory tier size in bytes per worker (allocated at start-up and "
        "added to the worker pod's memory request and limit; trtllm: split evenly over the "
        "worker's tensor-parallel ranks).",
    )
    disk_bytes: int = Field(
        default=0,
        ge=0,
        description="Disk tier budget in bytes; 0 means no disk tier. Not for the trtllm "
        "engine, which has no disk tier.",
    )
    disk_path: str = Field(
        default="",
        description="Directory of the disk tier's file (a local, fast disk); each worker "
        "writes its own file there.",
    )


class KvCacheSpec(ApiModel):
    """The pool's KV cache beyond the device pool."""

    offload: KvOffloadSpec = Field(default_factory=KvOffloadSpec)


class PoolSpec(ApiModel):
    """One worker pool (prefill or decode)."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "self.minReplicas <= self.maxReplicas",
            "minReplicas must not exceed maxReplicas",
            ".minReplicas",
        ),
        CelRule(
            "self.minReplicas <= self.replicas && self.replicas <= self.maxReplicas",
            "replicas must lie within [minReplicas, maxReplicas]",
            ".replicas",
        ),
        CelRule(
            "!has(self.gpusPerWorker) || self.gpusPerWorker == 0 || "
            "self.gpusPerWorker * self.nodesPerWorker >= self.tensorParallelSize",
            "gpusPerWorker x nodesPerWorker must cover tensorParallelSize",
            ".gpusPerWorker",
        ),
    )

    replicas: int = Field(
        default=1,
        ge=0,
        le=1000,
        description="Workers in the pool. Under autoscaling this is only the starting size.",
    )
    min_replicas: int = Field(default=0, ge=0, le=1000, description="Autoscaling floor.")
    max_replicas: int = Field(default=8, ge=0, le=1000, description="Autoscaling ceiling.")
    tensor_parallel_size: int = Field(default=1, ge=1, le=256)
    expert_parallel_size: int = Field(default=1, ge=1, le=256)
    gpus_per_worker: int | None = Field(
        default=None,
        ge=0,
        le=64,
        description="GPUs per worker pod; defaults to tensorParallelSize / nodesPerWorker "
        "on GPU profiles and 0 on cpu.",
    )
    nodes_per_worker: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Nodes one worker spans; more than 1 renders a LeaderWorkerSet.",
    )
    launcher: MultiNodeLauncher = Field(
        default=MultiNodeLauncher.RAY,
        description="How a worker spanning nodes starts its ranks: ray (each group a Ray "
        "cluster with token authentication; TensorRT-LLM's Ray orchestrator, the reference "
        "engine's tensor-parallel ranks) or mpi (mpirun over SSH with operator-made keys; "
        "TensorRT-LLM only).",
    )
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    affinity: OpenObject | None = Field(default=None, description="As in a PodSpec.")
    env: list[EnvVar] = Field(default_factory=list)
    engine_options: OpenObject = Field(
        default_factory=OpenObject,
        description="Engine options for this pool only, merged over spec.engine.options.",
    )
    pod_template: PodTemplateOverrides = Field(default_factory=PodTemplateOverrides)
    kv_cache: KvCacheSpec = Field(default_factory=KvCacheSpec)

    @property
    def group_launcher(self) -> MultiNodeLauncher | None:
        """How its workers' ranks start across the pods of a group; None when a worker
        fits one node (no group, no launcher)."""
        return self.launcher if self.nodes_per_worker > 1 else None


class KvTransferSpec(ApiModel):
    """How KV cache moves from prefill to decode workers."""

    backend: KvBackend = Field(default=KvBackend.NIXL, description="nixl (RDMA/UCX) or tcp.")
    nixl_backend: NixlBackend = Field(default=NixlBackend.UCX, description="NIXL plugin.")
    ucx_transports: list[str] = Field(
        default_factory=list,
        description="UCX_TLS entries, e.g. [rc, cuda_copy, cuda_ipc]; empty means the "
        "accelerator profile's default.",
    )
    max_tokens_in_buffer: int | None = Field(
        default=None,
        ge=1,
        description="Transfer buffer size in tokens; must hold the longest prompt. Defaults "
        "to model.maxInputTokens rounded up to the KV block size.",
    )
    timeout_seconds: float = Field(
        default=30.0, gt=0, le=600, description="A transfer not done by then fails loudly."
    )


class ScalingBehavior(ApiModel):
    """How fast a pool may move."""

    scale_up_stabilization_seconds: int = Field(
        default=0,
        ge=0,
        le=3600,
        description="Grow only as far as every round that measured the load of this many "
        "seconds asks (30 at 5 s rounds: six rounds); 0: at once.",
    )
    # 30 s / 4 keep GPU-seconds within 1.25x of an oracle on bursty traces in the
    # simulator (docs/autoscaling.md); 60 s / 1 cost ~1.5x on two-minute bursts.
    scale_down_stabilization_seconds: int = Field(
        default=30,
        ge=0,
        le=3600,
        description="Shrink only as far as every round that measured the load of this many "
        "seconds allows (30 at 5 s rounds: six rounds); 0: at once.",
    )
    max_step_up: int = Field(default=4, ge=1, le=100, description="Most replicas added at once.")
    max_step_down: int = Field(default=4, ge=1, le=100, description="Most removed at once.")
    tolerance: float = Field(
        default=0.1, ge=0, le=1, description="Ignore load changes within this fraction."
    )
    # 20 s keeps a pool from following the +-20% that 25 long prompts per interval vary
    # by; a pool that starts in seconds can afford to follow it (docs/autoscaling.md).
    smoothing_seconds: int = Field(
        default=20,
        ge=1,
        le=600,
        description="Time constant of the load signals' moving average: a sustained change "
        "smaller than 1.5x reaches the pool within about this long (larger ones at once).",
    )


class PrefillScalingSpec(ScalingBehavior):
    target_queued_tokens_per_replica: int = Field(
        default=32768,
        ge=1,
        description="Pending prefill tokens one prefill worker should carry; a 32k prompt "
        "weighs 32x a 1k one.",
    )
    target_tokens_per_second_per_replica: int | None = Field(
        default=None,
        ge=1,
        description="Prompt tokens per second one prefill worker should absorb (about 0.8x "
        "its measured prefill rate). When set, the pool is sized from the arrival rate, "
        "which reacts within two intervals and does not flap; when unset, only from the "
        "queue.",
    )
    backlog_drain_seconds: int = Field(
        default=120,
        ge=1,
        le=3600,
        description="With a rate target: how fast queued prompt tokens should be worked off.",
    )


class DecodeScalingSpec(ScalingBehavior):
    target_active_sequences_per_replica: int = Field(default=32, ge=1)
    target_kv_utilization: float = Field(default=0.8, gt=0, le=1)
    # Longer than scaleDownStabilizationSeconds on purpose: see ScalingConfig.
    scale_to_zero_idle_seconds: int = Field(
        default=300,
        ge=0,
        le=86_400,
        description="With decode.minReplicas 0: how long the pool must be idle (nothing "
        "queued, streaming or arriving) before its last worker is removed; any request "
        "restarts the count. The next request after that waits for a cold start "
        "(frontend.coldStartTimeoutSeconds).",
    )


class AutoscalingSpec(ApiModel):
    """Per-pool autoscaling from the router's load: prefill from queued prompt tokens or
    their arrival rate, decode from active sequences, request rate and KV use."""

    enabled: bool = False
    mode: AutoscalingMode = Field(default=AutoscalingMode.BUILTIN)
    interval_seconds: int = Field(default=5, ge=1, le=600)
    unschedulable_timeout_seconds: int = Field(
        default=120,
        ge=1,
        le=3600,
        description="A scale-up whose pods stay Pending this long is reported as "
        "Unschedulable and not pursued further until capacity appears.",
    )
    prefill: PrefillScalingSpec = Field(default_factory=PrefillScalingSpec)
    decode: DecodeScalingSpec = Field(default_factory=DecodeScalingSpec)


class SloSpec(ApiModel):
    """The latency users are promised, as 90th percentiles over requests."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "!has(self.longestGapP90Seconds) || self.longestGapP90Seconds >= self.itlP90Seconds",
            "longestGapP90Seconds must be at least itlP90Seconds: a stream's longest gap "
            "between two tokens is never shorter than its mean",
            ".longestGapP90Seconds",
        ),
    )

    ttft_p90_seconds: float = Field(
        gt=0, le=3600, description="Time to first token, p90 over requests, in seconds."
    )
    itl_p90_seconds: float = Field(
        gt=0,
        le=60,
        description="Each request's mean inter-token latency, p90 over requests, in seconds "
        "(0.01 is 100 tokens/s per stream).",
    )
    longest_gap_p90_seconds: float | None = Field(
        default=None,
        gt=0,
        le=3600,
        description="Each stream's longest wait between two tokens, p90 over requests, in "
        "seconds: bounds the stalls a mean ITL hides (another prompt's prefill chunk on the "
        "same worker). Unset: unbounded.",
    )


class RequestRateSpec(ApiModel):
    """The range of request rates the deployment must serve."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule("self.min <= self.max", "min must not exceed max", ".min"),
    )

    min: float = Field(default=0, ge=0, le=1_000_000, description="Requests per second, low.")
    max: float = Field(
        gt=0,
        le=1_000_000,
        description="Requests per second, high: the rate the plan is sized for (the "
        "autoscaler, when enabled, shrinks the pools below it).",
    )


class LengthWeight(ApiModel):
    """One bar of a length histogram: requests this many tokens long, and their weight."""

    tokens: int = Field(ge=1, le=1_048_576, description="The length, tokens.")
    weight: float = Field(
        gt=0,
        le=1e12,
        description="Its share of the requests, relative to the other bars' (weights need "
        "not sum to 1: counts work too).",
    )


class WorkloadSpec(ApiModel):
    """The traffic the deployment is planned for."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "!has(self.islP90) || self.islP90 >= self.isl",
            "islP90 must be at least isl (the median)",
            ".islP90",
        ),
        CelRule(
            "!has(self.oslP90) || self.oslP90 >= self.osl",
            "oslP90 must be at least osl (the median)",
            ".oslP90",
        ),
    )

    isl: int = Field(
        ge=1,
        le=1_048_576,
        description="Median prompt length (input sequence length), tokens.",
    )
    osl: int = Field(
        ge=1,
        le=1_048_576,
        description="Median answer length (output sequence length), tokens.",
    )
    isl_p90: int | None = Field(
        default=None,
        ge=1,
        le=1_048_576,
        description="90th percentile of prompt lengths: the planner then draws prompts from "
        "the log-normal through isl and it. Unset: every prompt is isl long.",
    )
    osl_p90: int | None = Field(
        default=None,
        ge=1,
        le=1_048_576,
        description="90th percentile of answer lengths, as islP90.",
    )
    isl_histogram: list[LengthWeight] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="Prompt lengths as a histogram: the planner draws each prompt from its "
        "bars (by weight) instead of the log-normal through isl and islP90, which misplaces "
        "a mix such as 1k chat with 32k documents (its mean is far from both). isl and "
        "islP90 still bound the workload re-planning compares with what it observes; a "
        "re-plan fills this from the frontends' length histograms.",
    )
    osl_histogram: list[LengthWeight] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="Answer lengths as a histogram, as islHistogram.",
    )
    requests_per_second: RequestRateSpec
    prefix_reuse_fraction: float = Field(
        default=0,
        ge=0,
        le=1,
        description="Share of prompt tokens already cached from earlier requests (shared "
        "system prompts, multi-turn chat). Stored and validated; the planner does not use it "
        "yet and plans as if no prefix were reused (conservative).",
    )


class ReplanSpec(ApiModel):
    """When planning.mode auto plans again from the workload the frontends measure."""

    enabled: bool = Field(
        default=True,
        description="Re-plan when the observed workload stays outside the planned one "
        "(planning.mode auto; check mode only reports what it observes).",
    )
    window_seconds: int = Field(
        default=300,
        ge=30,
        le=86_400,
        description="The span each observation covers, and how long the observed workload "
        "must stay outside the planned one before a re-plan (hysteresis).",
    )
    min_interval_seconds: int = Field(
        default=1800,
        ge=60,
        le=604_800,
        description="At most one re-plan per this many seconds: each re-plan rolls pods.",
    )
    tolerance: float = Field(
        default=0.5,
        gt=0,
        le=10,
        description="How far the observed workload may drift before it counts as outside "
        "the planned one: the median prompt or answer length beyond 1+tolerance times, or "
        "below 1/(1+tolerance) times, the planned length; the p90 prompt or answer length "
        "beyond 1+tolerance times the planned islP90/oslP90, where set; or the request rate "
        "above 1+tolerance times the planned maximum.",
    )


class TracingSpec(ApiModel):
    """Per-request OpenTelemetry traces (frontend, router, prefill, KV transfer, decode),
    exported over OTLP/gRPC to a collector such as Jaeger or the OpenTelemetry Collector.
    Off unless otlpEndpoint is set: without it every span is a no-op."""

    otlp_endpoint: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s/]+(:[0-9]+)?/?$",
        description="OTLP/gRPC receiver, e.g. http://otel-collector.monitoring:4317 "
        "(https:// for TLS). Unset: no traces are exported.",
    )
    sampling_ratio: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="Fraction of requests traced (decided once at the frontend; the "
        "router and workers follow the caller's decision).",
    )


class ObservabilitySpec(ApiModel):
    tracing: TracingSpec = Field(default_factory=TracingSpec)


class PlanningSpec(ApiModel):
    """Whether the operator plans the pools' shape from spec.slo and spec.workload."""

    mode: PlanningMode = Field(
        default=PlanningMode.OFF,
        description="off: the hand-written shape, no prediction. check: predict the "
        "hand-written shape's latency for the workload and report a miss (condition "
        "SloPredicted), changing nothing. auto: deploy the shape that meets the SLO on the "
        "fewest GPUs (replicas, tensor parallelism, max_num_tokens and, under autoscaling, "
        "its targets) instead of the hand-written one. check and auto need spec.slo and "
        "spec.workload; the plan is in status.plan. The reference engine (cpu profile) is "
        "profiled first by a Job on the decode pool's nodes; its table is ConfigMap "
        "<cluster>-perf-table.",
    )
    replan: ReplanSpec = Field(default_factory=ReplanSpec)


class DecodePoolSpec(PoolSpec):
    """The decode pool: like any pool, but empty only under autoscaling (someone must
    start a worker to stream the next request's tokens)."""

    min_replicas: int = Field(
        default=1,
        ge=0,
        le=1000,
        description="Autoscaling floor. 0 (autoscaling.enabled only) lets an idle cluster "
        "scale to no decode worker: the first request then waits for one to start "
        "(frontend.coldStartTimeoutSeconds).",
    )


class InferenceClusterSpec(ApiModel):
    """One served model: a frontend, a prefill pool and a decode pool."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        # At zero something must start a worker for the first request: an autoscaler
        # (builtin, or HPA/KEDA in external mode) reading the frontend's waiting demand.
        CelRule(
            "self.decode.minReplicas >= 1 || self.autoscaling.enabled",
            "decode.minReplicas 0 needs autoscaling.enabled: without an autoscaler nothing "
            "would start a decode worker for the first request",
            ".decode.minReplicas",
        ),
        CelRule(
            "!has(self.kvTransfer.maxTokensInBuffer) || "
            "self.kvTransfer.maxTokensInBuffer >= self.model.maxInputTokens",
            "kvTransfer.maxTokensInBuffer must hold the longest prompt (model.maxInputTokens)",
            ".kvTransfer.maxTokensInBuffer",
        ),
        CelRule(
            "self.engine.kind != 'trtllm' || self.accelerator.profile != 'cpu'",
            "the trtllm engine needs a GPU accelerator profile",
            ".engine.kind",
        ),
        # tandem.tokenization.selection.tokenizer_kind decides the same way.
        CelRule(
            "has(self.model.tokenizer) ? self.model.tokenizer != 'byte' || "
            "self.engine.kind == 'reference' : (has(self.model.source) && "
            "self.model.source.endsWith('.gguf')) || self.model.name.contains('gpt-oss') || "
            "self.engine.kind == 'reference'",
            "cannot choose a tokenizer: set model.tokenizer (gguf for a .gguf model.source, "
            "harmony for gpt-oss; byte is only the reference engine's test vocabulary)",
            ".model.tokenizer",
        ),
        # Transition rules (updates only). An InferenceCluster is one model on one kind of
        # hardware: changing either is a new cluster, brought up next to the old one.
        CelRule(
            "self.model.name == oldSelf.model.name",
            "model.name is immutable: an InferenceCluster serves one model; create another "
            "InferenceCluster for another model and move traffic to it",
            ".model.name",
        ),
        CelRule(
            "self.accelerator.profile == oldSelf.accelerator.profile",
            "accelerator.profile is immutable: other hardware means other nodes, images and "
            "KV transports; create another InferenceCluster and move traffic to it",
            ".accelerator.profile",
        ),
        CelRule(
            "self.planning.mode == 'off' || has(self.slo)",
            "planning.mode check and auto need an SLO: set slo",
            ".slo",
        ),
        CelRule(
            "self.planning.mode == 'off' || has(self.workload)",
            "planning.mode check and auto need a workload: set workload",
            ".workload",
        ),
        # The frontend refuses longer prompts: a workload of them plans for traffic that
        # can never arrive.
        CelRule(
            "!has(self.workload) || self.workload.isl <= self.model.maxInputTokens",
            "workload.isl must not exceed model.maxInputTokens (longer prompts are refused)",
            ".workload.isl",
        ),
        CelRule(
            "!has(self.workload) || !has(self.workload.islP90) || "
            "self.workload.islP90 <= self.model.maxInputTokens",
            "workload.islP90 must not exceed model.maxInputTokens (longer prompts are refused)",
            ".workload.islP90",
        ),
        CelRule(
            "!has(self.workload) || !has(self.workload.islHistogram) || "
            "self.workload.islHistogram.all(b, b.tokens <= self.model.maxInputTokens)",
            "workload.islHistogram's tokens must not exceed model.maxInputTokens (longer "
            "prompts are refused)",
            ".workload.islHistogram",
        ),
        CelRule(
            "!has(self.workload) || !has(self.workload.oslHistogram) || "
            "self.workload.oslHistogram.all(b, b.tokens <= self.model.maxOutputTokens)",
            "workload.oslHistogram's tokens must not exceed model.maxOutputTokens (answers "
            "are cut there)",
            ".workload.oslHistogram",
        ),
        # Planning reads step times: GPU profiles have measured tables for trtllm and
        # simulated; on cpu the operator profiles the reference engine (a Job).
        CelRule(
            "self.planning.mode == 'off' || self.accelerator.profile != 'cpu' || "
            "self.engine.kind == 'reference'",
            "planning on the cpu profile profiles the reference engine; the trtllm and "
            "simulated engines plan on a GPU profile",
            ".engine.kind",
        ),
        CelRule(
            "self.planning.mode == 'off' || self.engine.kind != 'reference' || "
            "self.accelerator.profile == 'cpu'",
            "planning the reference engine needs the cpu profile, where the operator "
            "profiles it; GPU profiles plan the trtllm or simulated engine",
            ".accelerator.profile",
        ),
        CelRule(
            "self.engine.kind == 'reference' || (has(self.model.tokenizer) ? "
            "self.model.tokenizer == 'harmony' : !(has(self.model.source) && "
            "self.model.source.endsWith('.gguf')) && self.model.name.contains('gpt-oss'))",
            "the trtllm and simulated engines serve gpt-oss models (tokenizer harmony)",
            ".model.tokenizer",
        ),
        # The reference engine runs one tensor-parallel rank per pod of a Ray group.
        *(
            CelRule(
                f"self.engine.kind != 'reference' || "
                f"self.{pool}.nodesPerWorker == self.{pool}.tensorParallelSize",
                f"the reference engine runs one tensor-parallel rank per pod: "
                f"spec.{pool}.nodesPerWorker must equal spec.{pool}.tensorParallelSize",
                f".{pool}.nodesPerWorker",
            )
            for pool in ("prefill", "decode")
        ),
        *(
            CelRule(
                f"self.engine.kind == 'trtllm' || self.{pool}.launcher == 'ray'",
                f"spec.{pool}.launcher mpi starts TensorRT-LLM's MPI world; the reference and "
                "simulated engines start under ray",
                f".{pool}.launcher",
            )
            for pool in ("prefill", "decode")
        ),
        # TensorRT-LLM's KV cache manager has one tier below the GPU, host memory (its
        # secondary pool, kv_cache_config.host_cache_size): nothing could honour a disk
        # budget. Every engine kind implements the host tier.
        *(
            CelRule(
                f"self.engine.kind != 'trtllm' || !self.{pool}.kvCache.offload.enabled || "
                f"self.{pool}.kvCache.offload.diskBytes == 0",
                f"the trtllm engine has no disk tier: spec.{pool}.kvCache.offload.diskBytes "
                "must be 0 (TensorRT-LLM offloads KV to host memory only: size hostBytes)",
                f".{pool}.kvCache.offload.diskBytes",
            )
            for pool in ("prefill", "decode")
        ),
    )

    model: ModelSpec
    engine: EngineSpec = Field(default_factory=EngineSpec)
    accelerator: AcceleratorSpec = Field(default_factory=AcceleratorSpec)
    frontend: FrontendSpec = Field(default_factory=FrontendSpec)
    prefill: PoolSpec = Field(default_factory=PoolSpec, description="The prefill pool.")
    decode: DecodePoolSpec = Field(default_factory=DecodePoolSpec, description="The decode pool.")
    kv_transfer: KvTransferSpec = Field(default_factory=KvTransferSpec)
    autoscaling: AutoscalingSpec = Field(default_factory=AutoscalingSpec)
    slo: SloSpec | None = Field(default=None, description="Latency targets (planning).")
    workload: WorkloadSpec | None = Field(
        default=None, description="The traffic to plan for (planning)."
    )
    planning: PlanningSpec = Field(default_factory=PlanningSpec)
    observability: ObservabilitySpec = Field(default_factory=ObservabilitySpec)


# --------------------------------------------------------------------------- status


class Condition(ApiModel):
    """A Kubernetes-style condition (metav1.Condition)."""

    model_config = ApiModel.model_config | {"extra": "ignore"}

    type: str
    status: str = Field(pattern=r"^(True|False|Unknown)$")
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class QueueDepth(ApiModel):
    requests: int = 0
    tokens: int = 0


class PoolStatus(ApiModel):
    """What a pool has, next to what it wants."""

    desired: int = 0
    replicas: int = 0
    ready: int = 0
    updated: int = 0
    queue_depth: QueueDepth = Field(default_factory=QueueDepth)


class InferenceClusterPools(ApiModel):
    prefill: PoolStatus = Field(default_factory=PoolStatus)
    decode: PoolStatus = Field(default_factory=PoolStatus)


class PlannedPool(ApiModel):
    """One pool as planned."""

    workers: int
    tensor_parallel_size: int
    max_num_tokens: int | None = Field(
        default=None, description="The step budget the plan sets; unset: the spec's."
    )
    max_batch_size: int | None = Field(
        default=None,
        description="The batch limit the plan sets (sequences per worker); unset: the spec's.",
    )


class PredictedLatency(ApiModel):
    """The simulated deployment's latency at the workload's highest rate (p90s, seconds)."""

    ttft_p90_seconds: float
    itl_p90_seconds: float
    longest_gap_p90_seconds: float


class PlannedTargets(ApiModel):
    """Autoscaling targets that keep the planned deployment within the SLO as the load
    moves: 0.8x its per-worker load at the most it serves within the SLO (auto,
    autoscaling on)."""

    prefill_tokens_per_second_per_replica: int | None = None
    decode_active_sequences_per_replica: int
    max_prefill_wait_seconds: float | None = None


class PlanStatus(ApiModel):
    """What the planner made of spec.slo and spec.workload (planning.mode check or auto)."""

    spec_hash: str = Field(description="Hash of the spec fields the plan was made from.")
    mode: PlanningMode
    shape: str | None = Field(
        default=None,
        description="The planned (auto) or checked (check) shape: 1P(TP2)+3D(TP1) is one "
        "prefill worker of TP2 and three decode workers of TP1, 3(TP1) agg three aggregated "
        "workers of TP1; unset when there is no plan.",
    )
    layout: str | None = Field(default=None, description="aggregated or disaggregated.")
    prefill: PlannedPool | None = Field(default=None, description="Unset when aggregated.")
    decode: PlannedPool | None = None
    gpus: int | None = None
    outcome: PlanOutcome
    requests_per_second: float | None = Field(
        default=None, description="The rate the prediction is for (workload's max)."
    )
    predicted: PredictedLatency | None = None
    tokens_per_second_per_gpu: float | None = None
    autoscaling: PlannedTargets | None = None
    clock_sources: list[str] = Field(
        default_factory=list,
        description="Where the step times came from (measured tables or the analytic model).",
    )
    message: str = Field(default="", description="The plan in words, or why there is none.")


class PlannedWorkload(ApiModel):
    """The workload the current plan is for."""

    isl: int
    osl: int
    isl_p90: int | None = None
    osl_p90: int | None = None
    isl_histogram: list[LengthWeight] | None = None
    osl_histogram: list[LengthWeight] | None = None
    requests_per_second: RequestRateSpec
    source: WorkloadSource
    spec_hash: str = Field(
        description="Hash of spec.workload when this was adopted: an edited spec.workload "
        "replaces an observed one."
    )


class ObservedWorkload(ApiModel):
    """What the frontends served over the last window."""

    isl_p50: int = Field(description="Median prompt length, tokens.")
    isl_p90: int
    osl_p50: int = Field(description="Median answer length, tokens.")
    osl_p90: int
    requests_per_second: float
    requests: int = Field(description="Requests the figures are computed from.")
    window_seconds: float
    time: str = Field(description="When the observation was taken (RFC 3339).")


class WorkloadStatus(ApiModel):
    """Planned against observed workload (planning.mode check or auto)."""

    planned: PlannedWorkload
    observed: ObservedWorkload | None = None
    outside: str | None = Field(
        default=None,
        description="How the observed workload is outside the planned one; unset inside.",
    )
    outside_since: str | None = None
    replans: int = Field(default=0, description="Re-plans from the observed workload.")
    last_replan_time: str | None = None


class InferenceClusterStatus(ApiModel):
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    pools: InferenceClusterPools = Field(default_factory=InferenceClusterPools)
    endpoint: str | None = Field(default=None, description="In-cluster URL of the frontend.")
    plan: PlanStatus | None = Field(
        default=None, description="The latest plan (spec.planning.mode check or auto)."
    )
    workload: WorkloadStatus | None = Field(
        default=None, description="Planned against observed workload (planning check or auto)."
    )


class WorkerPoolSpec(ApiModel):
    """One pool of an InferenceCluster; created and owned by the operator.

    ``replicas`` is the /scale target: HPA, KEDA or Tandem's autoscaler write it.
    """

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            "self.minReplicas <= self.maxReplicas",
            "minReplicas must not exceed maxReplicas",
            ".minReplicas",
        ),
        CelRule("self.role == oldSelf.role", "role is immutable", ".role"),
        CelRule(
            "self.clusterName == oldSelf.clusterName", "clusterName is immutable", ".clusterName"
        ),
    )

    cluster_name: str = Field(pattern=DNS_LABEL, description="The owning InferenceCluster.")
    role: PoolRole
    replicas: int = Field(default=1, ge=0, le=1000)
    min_replicas: int = Field(default=0, ge=0, le=1000)
    max_replicas: int = Field(default=8, ge=0, le=1000)


class WorkerPoolStatus(ApiModel):
    observed_generation: int | None = None
    replicas: int = 0
    ready_replicas: int = 0
    updated_replicas: int = 0
    desired_replicas: int = 0
    selector: str = Field(default="", description="Label selector of the pool's pods (/scale).")
    queue_depth: QueueDepth = Field(default_factory=QueueDepth)
    last_scale_time: str | None = None
    last_scale_reason: str | None = None
    conditions: list[Condition] = Field(default_factory=list)


# --------------------------------------------------------------------------- objects


class ObjectMeta(ApiModel):
    """The parts of metav1.ObjectMeta a manifest author sets; the rest is ignored."""

    model_config = ApiModel.model_config | {"extra": "ignore"}

    name: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL)
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    generation: int | None = None
    uid: str | None = None


# Child objects are named "<cluster>-<role>-..." and must stay valid DNS labels.
MAX_CLUSTER_NAME = 40


class InferenceCluster(ApiModel):
    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            f"self.metadata.name.size() <= {MAX_CLUSTER_NAME}",
            f"metadata.name must be at most {MAX_CLUSTER_NAME} characters (children append "
            "suffixes to it)",
            ".metadata.name",
        ),
    )

    api_version: str = Field(default=API_VERSION, pattern=rf"^{GROUP}/{VERSION}$")
    kind: str = Field(default="InferenceCluster", pattern=r"^InferenceCluster$")
    metadata: ObjectMeta
    spec: InferenceClusterSpec
    status: InferenceClusterStatus | None = None


class WorkerPool(ApiModel):
    api_version: str = Field(default=API_VERSION, pattern=rf"^{GROUP}/{VERSION}$")
    kind: str = Field(default="WorkerPool", pattern=r"^WorkerPool$")
    metadata: ObjectMeta
    spec: WorkerPoolSpec
    status: WorkerPoolStatus | None = None
