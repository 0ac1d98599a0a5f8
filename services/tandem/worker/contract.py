"""Reading the operator's worker document (``--config /etc/tandem/<role>.json``).

Rendered by ``tandem_operator.render.contract.render_worker_config``; only the fields a worker
needs are read, and command-line flags win over them. Pure: a dict in, settings out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SUPPORTED_CONTRACT_VERSION = 1


class ContractError(ValueError):
    """The document is not a worker document this version understands."""


@dataclass(frozen=True, slots=True)
class ContractSettings:
    role: str | None = None
    cluster: str | None = None
    engine: str | None = None
    engine_options: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] | None = None  # spec.model, wire form (selects the tokenizer)
    model_source: str | None = None  # spec.model.source
    kv_backend: str | None = None
    kv_transfer_timeout_s: float | None = None
    ucx_transports: tuple[str, ...] = ()


def read_contract(doc: Mapping[str, Any]) -> ContractSettings:
    version = doc.get("contractVersion")
    if isinstance(version, int) and version > SUPPORTED_CONTRACT_VERSION:
        # Version skew: the operator was upgraded before this worker's image. Fields of
        # a newer contract may change what a worker must do, so none are guessed at.
        raise ContractError(
            f"worker config contractVersion {version} is newer than this worker reads "
            f"({SUPPORTED_CONTRACT_VERSION}): run a worker image as new as the operator "
            "(docs/operator.md, Upgrading)"
        )
    if version != SUPPORTED_CONTRACT_VERSION:
        raise ContractError(
            f"worker config contractVersion {version!r} is not {SUPPORTED_CONTRACT_VERSION}"
        )
    engine = _mapping(doc, "engine")
    model = _mapping(doc, "model")
    kv = _mapping(doc, "kvTransfer")
    options = engine.get("options", {})
    if not isinstance(options, dict):
        raise ContractError("engine.options must be an object")
    timeout = kv.get("timeoutSeconds")
    transports = kv.get("ucxTransports", [])
    if not isinstance(transports, list) or not all(isinstance(t, str) for t in transports):
        raise ContractError("kvTransfer.ucxTransports must be a list of strings")
    return ContractSettings(
        model=dict(model) if "model" in doc else None,
        role=_optional_str(doc, "role"),
        cluster=_optional_str(doc, "cluster"),
        engine=_optional_str(engine, "kind"),
        engine_options=dict(options),
        model_source=_optional_str(model, "source"),
        kv_backend=_optional_str(kv, "backend"),
        kv_transfer_timeout_s=float(timeout) if isinstance(timeout, int | float) else None,
        ucx_transports=tuple(transports),
    )


def _mapping(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = doc.get(key, {})
    if not isinstance(value, Mapping):
        raise ContractError(f"{key} must be an object")
    return value


def _optional_str(doc: Mapping[str, Any], key: str) -> str | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, str):
        raise ContractError(f"{key} must be a string")
    return value
