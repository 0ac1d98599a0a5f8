"""Configuration of the reference model: architecture, KV pool and prefill chunking."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from tandem.engines.base import EngineError
from tandem.tokenization import ByteTokenizer

_TOKENIZER = ByteTokenizer()


class ReferenceConfigError(EngineError):
    """An engine option is unknown, mistyped or out of range; the message names it."""


@dataclass(frozen=True, slots=True)
class ReferenceModelConfig:
    """A gpt-oss-shaped decoder. Even layers use sliding-window attention, odd layers
    full attention (as gpt-oss alternates them). ``num_experts == 0`` means a dense
    SwiGLU MLP; otherwise each token runs ``experts_per_token`` of ``num_experts``.

    A KV *block* holds ``kv_block_size`` tokens of ONE layer; ``num_kv_blocks`` blocks
    make up the pool shared by all layers and sequences.
    """

    model_name: str = "tandem-reference"
    num_layers: int = 4
    hidden: int = 256
    num_heads: int = 8
    num_kv_heads: int = 2
    head_dim: int = 32
    sliding_window: int = 128
    num_experts: int = 0
    experts_per_token: int = 2
    intermediate: int = 512
    vocab_size: int = _TOKENIZER.vocab_size
    eos_token_id: int = _TOKENIZER.eos_token_id
    max_context: int = 131_072
    rope_theta: float = 150_000.0
    rms_norm_eps: float = 1e-5
    kv_block_size: int = 16
    num_kv_blocks: int = 16_384
    prefill_chunk: int = 512
    attention_tile: int = 1024
    # BLAS results depend on its thread count (it may split reductions): every engine
    # exchanging KV must use the same value, so it is part of the digest.
    blas_threads: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        _validate(self)

    @classmethod
    def from_options(cls, options: Mapping[str, object]) -> ReferenceModelConfig:
        """Build from loosely typed engine options (YAML/CLI), naming any bad field."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - set(fields))
        if unknown:
            raise ReferenceConfigError(
                f"unknown reference engine option(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(fields))}"
            )
        values: dict[str, object] = {}
        for name, raw in options.items():
            values[name] = _coerce(name, type(getattr(_DEFAULTS, name)), raw)
        return cls(**values)  # type: ignore[arg-type]

    def is_sliding(self, layer: int) -> bool:
        return layer % 2 == 0

    @property
    def kv_token_bytes(self) -> int:
        """Bytes of K and V for one token in one layer (float32)."""
        return 2 * self.num_kv_heads * self.head_dim * 4

    @property
    def kv_block_bytes(self) -> int:
        return self.kv_block_size * self.kv_token_bytes

    def digest(self) -> str:
        """Identifies weights and KV layout: two engines can exchange KV iff equal.
        Pool size and prefill tiling are excluded because they do not change the bytes."""
        local_only = {"num_kv_blocks", "prefill_chunk", "attention_tile", "max_context"}
        shared = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in dataclasses.fields(self)
            if f.name not in local_only
        ]
        return hashlib.sha256(";".join(shared).encode()).hexdigest()[:16]


def _coerce(name: str, expected: type, raw: object) -> object:
    # bool is an int subclass; a flag passed for a count is a mistake, not a 1.
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise ReferenceConfigError(f"option {name}: expected {expected.__name__}, got {raw!r}")
    try:
        if expected is int:
            if isinstance(raw, float) and not raw.is_integer():
                raise ValueError(raw)
            return int(raw)
        if expected is float:
            return float(raw)
        return str(raw)
    except ValueError:
        raise ReferenceConfigError(
            f"option {name}: expected {expected.__name__}, got {raw!r}"
        ) from None


def _validate(config: ReferenceModelConfig) -> None:
    positive = (
        "num_layers",
        "hidden",
        "num_heads",
        "num_kv_heads",
        "head_dim",
        "sliding_window",
        "experts_per_token",
        "intermediate",
        "vocab_size",
        "max_context",
        "kv_block_size",
        "num_kv_blocks",
        "prefill_chunk",
        "attention_tile",
        "blas_threads",
    )
    for name in positive:
        if getattr(config, name) < 1:
            raise ReferenceConfigError(f"option {name} must be >= 1, got {getattr(config, name)}")
    if config.num_experts < 0:
        raise ReferenceConfigError(f"option num_experts must be >= 0, got {config.num_experts}")
    if config.num_experts and config.experts_per_token > config.num_experts:
        raise ReferenceConfigError(
            f"option experts_per_token ({config.experts_per_token}) exceeds "
            f"num_experts ({config.num_experts})"
        )
    if config.num_heads % config.num_kv_heads:
        raise ReferenceConfigError(
            f"option num_heads ({config.num_heads}) must be a multiple of "
            f"num_kv_heads ({config.num_kv_heads})"
        )
    if config.head_dim % 2:
        raise ReferenceConfigError(f"option head_dim must be even for RoPE, got {config.head_dim}")
    if not 0 <= config.eos_token_id < config.vocab_size:
        raise ReferenceConfigError(
            f"option eos_token_id ({config.eos_token_id}) is outside the vocabulary"
        )
    if config.rope_theta <= 1.0:
        raise ReferenceConfigError(f"option rope_theta must be > 1, got {config.rope_theta}")
    if config.rms_norm_eps <= 0.0:
        raise ReferenceConfigError(f"option rms_norm_eps must be > 0, got {config.rms_norm_eps}")
    if not config.model_name:
        raise ReferenceConfigError("option model_name must not be empty")


_DEFAULTS = ReferenceModelConfig()
