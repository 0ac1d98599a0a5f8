"""Options of the trtllm engine as a worker receives them.

``{"model": "/models/gpt-oss-120b", "role": "prefill", "llm_args": {...}}`` where
``llm_args`` is ``render_trtllm_config(cluster, role)`` (the same dict the operator puts
into the pod's ``extra_llm_api_options`` YAML). Static model facts (vocabulary size, end
token, context length, KV block size) default from the rendered options and the known
architectures; override them for other models.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tandem.api.v1alpha1 import PoolRole
from tandem.capacity.models import find_architecture
from tandem.engines.base import EngineError
from tandem.engines.trtllm import llm_args

# gpt-oss ends an answer with harmony's <|return|> (o200k_harmony id 200002, as listed by
# openai-harmony's special-token table).
GPT_OSS_RETURN_TOKEN = 200_002

_KNOWN = frozenset(
    {
        "model",
        "role",
        "llm_args",
        "model_name",
        "vocab_size",
        "eos_token_id",
        "max_context",
        "request_timeout_s",
        "load_timeout_s",
        "stats_timeout_s",
    }
)


class TrtllmOptionsError(EngineError):
    """An engine option is missing or malformed; the message names it."""


@dataclass(frozen=True, slots=True)
class TrtllmEngineOptions:
    model: str
    role: PoolRole
    model_name: str
    vocab_size: int
    eos_token_id: int
    max_context: int
    kv_block_size: int
    llm_args: Mapping[str, Any] = field(default_factory=dict)
    # Longest wait for a prefill result or for the next streamed token.
    request_timeout_s: float = 600.0
    # Loading 60 GiB of weights takes minutes.
    load_timeout_s: float = 1800.0
    # How long one stats poll waits for TensorRT-LLM's stats queue.
    stats_timeout_s: float = 0.05

    @classmethod
    def from_options(cls, options: Mapping[str, object]) -> TrtllmEngineOptions:
        unknown = sorted(set(options) - _KNOWN)
        if unknown:
            raise TrtllmOptionsError(
                f"unknown trtllm engine option(s) {', '.join(unknown)}; known: "
                f"{', '.join(sorted(_KNOWN))} (LLM API arguments go under llm_args)"
            )
        model = options.get("model")
        if not isinstance(model, str) or not model:
            raise TrtllmOptionsError("trtllm engine option `model` (a model directory) is required")
        try:
            role = PoolRole(str(options.get("role")))
        except ValueError:
            raise TrtllmOptionsError(
                "trtllm engine option `role` must be prefill or decode"
            ) from None
        args = options.get("llm_args", {})
        if not isinstance(args, Mapping):
            raise TrtllmOptionsError("trtllm engine option `llm_args` must be a mapping")
        name = _text(options, "model_name", model)
        architecture = find_architecture(name) or find_architecture(model)
        kv_cache = args.get("kv_cache_config")
        block = kv_cache.get("tokens_per_block") if isinstance(kv_cache, Mapping) else None
        return cls(
            model=model,
            role=role,
            model_name=name,
            vocab_size=_int(options, "vocab_size", architecture and architecture.vocab_size),
            eos_token_id=_int(
                options, "eos_token_id", GPT_OSS_RETURN_TOKEN if architecture else None
            ),
            max_context=_int(
                options,
                "max_context",
                args.get("max_seq_len") or (architecture and architecture.max_context),
            ),
            kv_block_size=_int({}, "tokens_per_block", block or llm_args.DEFAULT_TOKENS_PER_BLOCK),
            llm_args=dict(args),
            request_timeout_s=_seconds(options, "request_timeout_s", 600.0),
            load_timeout_s=_seconds(options, "load_timeout_s", 1800.0),
            stats_timeout_s=_seconds(options, "stats_timeout_s", 0.05),
        )


def _text(options: Mapping[str, object], key: str, default: str) -> str:
    value = options.get(key, default)
    if not isinstance(value, str) or not value:
        raise TrtllmOptionsError(f"trtllm engine option `{key}` must be a non-empty string")
    return value


def _int(options: Mapping[str, object], key: str, default: object) -> int:
    value = options.get(key, default)
    if value is None:
        raise TrtllmOptionsError(
            f"trtllm engine option `{key}` is required for a model Tandem does not know"
        )
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TrtllmOptionsError(f"trtllm engine option `{key}` must be a positive integer")
    return value


def _seconds(options: Mapping[str, object], key: str, default: float) -> float:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise TrtllmOptionsError(f"trtllm engine option `{key}` must be a positive number")
    return float(value)
