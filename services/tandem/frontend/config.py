"""The frontend's configuration document (``--config FILE``, JSON or YAML).

It is the operator/frontend contract document (``tandem_operator.render.contract.
render_frontend_config``: camelCase, ``contractVersion: 1``), which the local runtime
also writes through :func:`render_frontend_config`. Optional sections the operator does
not emit (``engineKind``, ``router``, ``maxBodyBytes``) tune the router; their defaults
suit a Kubernetes deployment. Unknown keys are ignored so that a newer operator's
documents still load.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from tandem.api.v1alpha1 import (
    EngineKind,
    FrontendSpec,
    InferenceCluster,
    InferenceClusterSpec,
    ModelSpec,
    RoutingPolicy,
    TenantLimitsSpec,
)
from tandem.router.messages import RouterConfig
from tandem.router.policy import PolicyConfig, WorkerRole
from tandem.router.targets import validate_target

CONTRACT_VERSION = 1


class _Doc(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )


class DisaggregationSettings(_Doc):
    min_prefill_tokens: int = Field(default=512, ge=0)
    max_prefill_wait_seconds: float | None = Field(default=None, gt=0)
    max_prefill_start_wait_seconds: float | None = Field(default=None, gt=0)


class TenantLimits(_Doc):
    """One tenant's share and limits (``None``: unlimited)."""

    weight: int = Field(default=1, ge=1, le=1000)
    max_in_flight_requests: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(default=None, ge=1)


class TenancySettings(_Doc):
    """Limits of the tenants the spec names; every other tenant gets ``defaults``."""

    defaults: TenantLimits = Field(default_factory=TenantLimits)
    tenants: dict[str, TenantLimits] = Field(default_factory=dict)


def tenancy_settings(spec: FrontendSpec) -> TenancySettings:
    """Pure: the tenants' limits as the spec sets them (local runs and the operator)."""

    def limits(tenant: TenantLimitsSpec) -> TenantLimits:
        return TenantLimits(
            weight=tenant.weight,
            max_in_flight_requests=tenant.max_in_flight_requests,
            tokens_per_minute=tenant.tokens_per_minute,
        )

    return TenancySettings(
        defaults=limits(spec.tenant_defaults), tenants={t.name: limits(t) for t in spec.tenants}
    )


def cold_start_timeout(spec: InferenceClusterSpec) -> int | None:
    """Pure: how long a request may wait for a decode worker to start; None where the
    decode pool keeps a worker (nothing to wait for: the document, and so the frontend
    pods, stay as they were)."""
    return spec.frontend.cold_start_timeout_seconds if spec.decode.min_replicas == 0 else None


class FrontendSettings(_Doc):
    routing_policy: RoutingPolicy = RoutingPolicy.KV_AWARE
    disaggregation: DisaggregationSettings = Field(default_factory=DisaggregationSettings)
    max_queued_requests: int = Field(default=256, ge=1)
    max_migrations: int = Field(default=2, ge=0)
    # Set: the decode pool may be empty; a request waits this long for a worker to start.
    cold_start_timeout_seconds: float | None = Field(default=None, gt=0)
    tenancy: TenancySettings = Field(default_factory=TenancySettings)


class ApiKeySettings(_Doc):
    """``Authorization: Bearer`` keys (``tandem.frontend.api_keys``): records read from
    ``directories`` (mounted Secrets) and re-read every ``reloadSeconds`` if changed."""

    required: bool = True
    directories: list[str] = Field(default_factory=list)
    reload_seconds: float = Field(default=5.0, gt=0)


class RouterTuning(_Doc):
    """Knobs beyond the spec; ``None`` means "derive from the engine kind"."""

    prefill_saturation_tokens: int | None = Field(default=None, ge=1)
    max_active_requests: int | None = Field(default=None, ge=1)
    retry_after_seconds: int = Field(default=1, ge=0)
    prefill_timeout_seconds: float | None = Field(default=None, gt=0)
    stall_timeout_seconds: float = Field(default=120.0, gt=0)
    health_interval_seconds: float = Field(default=1.0, gt=0)
    health_timeout_seconds: float = Field(default=2.0, gt=0)
    max_prefill_attempts: int = Field(default=2, ge=1)
    max_decode_attempts: int = Field(default=3, ge=1)
    # Requests sent on and awaiting their first token, per ready worker (at least this
    # many in all); more wait in the frontend's tenant queue and leave in weighted-fair
    # order, except one each for tenants below their share (tandem.frontend.tenancy).
    dispatch_depth: int = Field(default=2, ge=1)


class FrontendConfig(_Doc):
    contract_version: int = CONTRACT_VERSION
    cluster: str = ""
    model: ModelSpec
    served_model_name: str | None = None
    frontend: FrontendSettings = Field(default_factory=FrontendSettings)
    # Pool role -> target(s): "kubernetes:///svc.ns:port", "file:///path", "host:port"
    # (see tandem.router.targets).
    workers: dict[str, str | list[str]] = Field(default_factory=dict)
    kv_transfer_timeout_seconds: float = Field(default=30.0, gt=0)
    engine_kind: EngineKind = EngineKind.REFERENCE
    router: RouterTuning = Field(default_factory=RouterTuning)
    max_body_bytes: int | None = Field(default=None, ge=1024)
    # The engine's context window, when smaller than maxInputTokens + maxOutputTokens.
    max_context_tokens: int | None = Field(default=None, ge=2)
    # None: no keys, which the frontend accepts only on a loopback address.
    api_keys: ApiKeySettings | None = None
    # Set: /metrics is served on this port only, never on the API's (the scraper's port,
    # which the cluster's NetworkPolicy opens to the operator and Prometheus alone).
    metrics_port: int | None = Field(default=None, ge=1, le=65535)

    @field_validator("workers")
    @classmethod
    def _check_workers(cls, workers: dict[str, str | list[str]]) -> dict[str, str | list[str]]:
        roles = {r.value for r in WorkerRole}
        for role, targets in workers.items():
            if role not in roles:
                raise ValueError(
                    f"workers: unknown pool {role!r} (expected one of {sorted(roles)})"
                )
            for target in [targets] if isinstance(targets, str) else targets:
                validate_target(target)
        return workers

    @property
    def served_model(self) -> str:
        return self.served_model_name or self.model.public_name

    @property
    def context_tokens(self) -> int:
        """Prompt plus completion limit: the engine's window, within the model's limits."""
        declared = self.model.max_input_tokens + self.model.max_output_tokens
        return min(declared, self.max_context_tokens or declared)

    @property
    def body_limit(self) -> int:
        """Room for the longest prompt as JSON token ids (~8 bytes each) or escaped text."""
        if self.max_body_bytes is not None:
            return self.max_body_bytes
        return max(1 << 20, 32 * self.model.max_input_tokens)


def compute_router_config(config: FrontendConfig) -> RouterConfig:
    """Pure: the router settings a frontend document asks for."""
    tuning = config.router
    max_input = config.model.max_input_tokens
    # A GPU prefills a long prompt in about a second; the CPU reference engine takes
    # minutes, and the simulated engine's clock may run many times slower than real time
    # (speedup < 1), so a queue of prompts modelled in seconds can take minutes.
    trtllm = config.engine_kind is EngineKind.TRTLLM
    prefill_timeout = tuning.prefill_timeout_seconds or (120.0 if trtllm else 900.0)
    queued = config.frontend.max_queued_requests
    policy = PolicyConfig(
        routing=config.frontend.routing_policy,
        min_prefill_tokens=config.frontend.disaggregation.min_prefill_tokens,
        # A prefill worker with several maximal prompts queued is saturated (or, with a
        # wait limit, one that would take longer than it).
        prefill_saturation_tokens=tuning.prefill_saturation_tokens or 4 * max_input,
        max_prefill_wait_seconds=config.frontend.disaggregation.max_prefill_wait_seconds,
        max_prefill_start_wait_seconds=(
            config.frontend.disaggregation.max_prefill_start_wait_seconds
        ),
    )
    return RouterConfig(
        policy=policy,
        max_queued_requests=queued,
        max_active_requests=tuning.max_active_requests or 4 * queued,
        retry_after_seconds=tuning.retry_after_seconds,
        prefill_timeout_seconds=prefill_timeout,
        first_token_timeout_seconds=prefill_timeout + config.kv_transfer_timeout_seconds,
        stall_timeout_seconds=tuning.stall_timeout_seconds,
        health_interval_seconds=tuning.health_interval_seconds,
        health_timeout_seconds=tuning.health_timeout_seconds,
        max_prefill_attempts=tuning.max_prefill_attempts,
        max_decode_attempts=tuning.max_decode_attempts,
        max_migrations=config.frontend.max_migrations,
        cold_start_wait_seconds=config.frontend.cold_start_timeout_seconds or 0.0,
    )


def render_frontend_config(
    cluster: InferenceCluster,
    workers: dict[str, str | list[str]],
    *,
    router: RouterTuning | None = None,
    api_keys: ApiKeySettings | None = None,
) -> dict[str, object]:
    """Pure: the contract document for ``cluster`` with the given worker targets
    (the operator renders the same shape with DNS targets); ``api_keys`` None: keyless."""
    spec = cluster.spec
    doc = FrontendConfig(
        cluster=cluster.metadata.name,
        model=spec.model,
        served_model_name=spec.model.public_name,
        frontend=FrontendSettings(
            routing_policy=spec.frontend.routing_policy,
            disaggregation=DisaggregationSettings(
                min_prefill_tokens=spec.frontend.disaggregation.min_prefill_tokens,
                max_prefill_wait_seconds=spec.frontend.disaggregation.max_prefill_wait_seconds,
                max_prefill_start_wait_seconds=(
                    spec.frontend.disaggregation.max_prefill_start_wait_seconds
                ),
            ),
            max_queued_requests=spec.frontend.max_queued_requests,
            max_migrations=spec.frontend.max_migrations,
            tenancy=tenancy_settings(spec.frontend),
            cold_start_timeout_seconds=cold_start_timeout(spec),
        ),
        workers=workers,
        kv_transfer_timeout_seconds=spec.kv_transfer.timeout_seconds,
        engine_kind=spec.engine.kind,
        router=router or RouterTuning(),
        api_keys=api_keys,
    )
    return doc.model_dump(mode="json", by_alias=True, exclude_none=True)


def load_frontend_config(path: Path) -> FrontendConfig:
    text = path.read_text()
    data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    # Checked before the fields: a newer operator's document may reshape them, and its
    # version says so in one line where validation would list every difference.
    version = data.get("contractVersion", CONTRACT_VERSION) if isinstance(data, dict) else None
    if version != CONTRACT_VERSION:
        raise ValueError(
            f"{path}: contractVersion {version} is not supported "
            f"(this frontend reads version {CONTRACT_VERSION}; run a frontend image as new "
            "as the operator)"
        )
    return FrontendConfig.model_validate(data)
