"""Configuration of the reference model: its architecture, and how this engine runs it.

Two kinds of fields:

- *architecture* (layers, heads, vocabulary, RoPE...): for the random gpt-oss-shaped
  model they are engine options; for a GGUF model they come from the file's metadata and
  setting one as an option is an error (the file decides);
- *engine* settings (KV pool, per-step token budget, tiling, BLAS threads, prefix cache):
  options for both.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from tandem.engines.base import EngineError
from tandem.tokenization import ByteTokenizer

_TOKENIZER = ByteTokenizer()

ROPE_PAIRINGS = ("halves", "adjacent")


class ReferenceConfigError(EngineError):
    """An engine option is unknown, mistyped or out of range; the message names it."""


@dataclass(frozen=True, slots=True)
class ReferenceModelConfig:
    """A decoder-only transformer. With ``sliding_window > 0`` even layers use
    sliding-window attention and odd layers full attention (as gpt-oss alternates them);
    0 means every layer attends to the whole context (llama). ``num_experts == 0`` means
    a dense SwiGLU MLP; otherwise each token runs ``experts_per_token`` of
    ``num_experts``.

    A KV *block* holds ``kv_block_size`` tokens of ONE layer; ``num_kv_blocks`` blocks
    make up the pool shared by all layers and sequences. An engine step with decode
    rows computes at most ``max_batch_tokens`` tokens (the rows first, then prefill
    chunks, deep prompt tokens counted with their attention: ``step_plan``); a step with
    only prefills computes chunks of up to ``prefill_chunk`` tokens.
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
    rope_pairing: str = "halves"
    rms_norm_eps: float = 1e-5
    # sha256 of the weights file; "" means deterministic random weights from ``seed``.
    weights_digest: str = ""
    seed: int = 0
    kv_block_size: int = 16
    num_kv_blocks: int = 16_384
    max_batch_tokens: int = 64
    prefill_chunk: int = 256
    # Rows per BLAS call and keys per attention tile: they decide rounding, so every
    # engine exchanging KV must use the same values (part of the digest).
    row_tile: int = 8
    attention_tile: int = 256
    # BLAS results depend on its thread count (it may split reductions): every engine
    # exchanging KV must use the same value, so it is part of the digest.
    blas_threads: int = 1
    # Ranks the model's KV heads and MLP columns are split across (``tp``): 1 runs the
    # whole model in this process; N needs a Ray cluster with a node for each of the
    # N - 1 follower ranks. Part of the digest: each rank's KV holds its heads only.
    tensor_parallel_size: int = 1
    prefix_cache: bool = True
    # KV offload tiers below the pool (``tandem.kv.offload``): prefix-cache blocks the
    # pool evicts go to host memory, then to a file in ``offload_disk_path``. 0: no tier.
    offload_host_bytes: int = 0
    offload_disk_bytes: int = 0
    offload_disk_path: str = ""

    def __post_init__(self) -> None:
        _validate(self)

    @classmethod
    def from_options(
        cls, options: Mapping[str, object], architecture: Mapping[str, object] | None = None
    ) -> ReferenceModelConfig:
        """Build from loosely typed engine options (YAML/CLI), naming any bad field.
        ``architecture`` (from a model file) fixes the architecture fields; options may
        then only set engine fields, and ``max_context`` only below the model's."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - fields)
        if unknown:
            raise ReferenceConfigError(
                f"unknown reference engine option(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(fields))}"
            )
        values = {name: _coerce(name, raw) for name, raw in options.items()}
        if architecture is not None:
            fixed = sorted(set(values) & (ARCHITECTURE_FIELDS - {"max_context"}))
            if fixed:
                raise ReferenceConfigError(
                    f"option(s) {', '.join(fixed)} are set by the model file; remove them "
                    "from the engine options"
                )
            limit = architecture["max_context"]
            asked = values.get("max_context", limit)
            if not isinstance(asked, int) or not isinstance(limit, int) or asked > limit:
                raise ReferenceConfigError(
                    f"option max_context ({asked}) exceeds the model's context ({limit})"
                )
            values = {**architecture, **values}
        return cls(**values)  # type: ignore[arg-type]

    def is_sliding(self, layer: int) -> bool:
        return self.sliding_window > 0 and layer % 2 == 0

    def window_of(self, layer: int) -> int | None:
        return self.sliding_window if self.is_sliding(layer) else None

    @property
    def kv_token_bytes(self) -> int:
        """Bytes of K and V for one token in one layer (float32)."""
        return 2 * self.num_kv_heads * self.head_dim * 4

    @property
    def kv_block_bytes(self) -> int:
        return self.kv_block_size * self.kv_token_bytes

    def digest(self) -> str:
        """Identifies weights, arithmetic and KV layout: two engines can exchange KV iff
        equal. Pool size, step budget, context cap and caching are excluded: they change
        no byte (a token computes identically in any chunk or batch). So is the
        tensor-parallel size: a group hands its KV over in the whole model's layout
        (``tp.whole_kv``), and what it changes, the order partial sums are added in, moves
        values by rounding only, as it does between TensorRT-LLM workers of different TP."""
        shared = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in dataclasses.fields(self)
            if f.name not in LOCAL_FIELDS and f.name != "tensor_parallel_size"
        ]
        return hashlib.sha256(";".join(shared).encode()).hexdigest()[:16]


ENGINE_FIELDS = frozenset(
    {
        "kv_block_size",
        "num_kv_blocks",
        "max_batch_tokens",
        "prefill_chunk",
        "row_tile",
        "attention_tile",
        "blas_threads",
        "tensor_parallel_size",
        "prefix_cache",
        "max_context",
        "offload_host_bytes",
        "offload_disk_bytes",
        "offload_disk_path",
    }
)
ARCHITECTURE_FIELDS = frozenset(
    f.name for f in dataclasses.fields(ReferenceModelConfig) if f.name not in ENGINE_FIELDS
) | {"max_context"}
LOCAL_FIELDS = frozenset(
    {
        "num_kv_blocks",
        "max_batch_tokens",
        "prefill_chunk",
        "max_context",
        "prefix_cache",
        "offload_host_bytes",
        "offload_disk_bytes",
        "offload_disk_path",
    }
)


def _coerce(name: str, raw: object) -> object:
    expected = type(getattr(_DEFAULTS, name))
    if expected is bool:
        if isinstance(raw, bool):
            return raw
        raise ReferenceConfigError(f"option {name}: expected true or false, got {raw!r}")
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


_POSITIVE = (
    "num_layers",
    "hidden",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "experts_per_token",
    "intermediate",
    "vocab_size",
    "max_context",
    "kv_block_size",
    "num_kv_blocks",
    "max_batch_tokens",
    "prefill_chunk",
    "row_tile",
    "attention_tile",
    "blas_threads",
    "tensor_parallel_size",
)


def _validate(config: ReferenceModelConfig) -> None:
    for name in _POSITIVE:
        if getattr(config, name) < 1:
            raise ReferenceConfigError(f"option {name} must be >= 1, got {getattr(config, name)}")
    for name in ("num_experts", "offload_host_bytes", "offload_disk_bytes"):
        if getattr(config, name) < 0:
            raise ReferenceConfigError(f"option {name} must be >= 0, got {getattr(config, name)}")
    if config.offload_disk_bytes and not config.offload_disk_path:
        raise ReferenceConfigError("option offload_disk_bytes needs offload_disk_path")
    if (config.offload_host_bytes or config.offload_disk_bytes) and not config.prefix_cache:
        # The tiers keep prefix-cache entries: without the cache there is nothing to keep.
        raise ReferenceConfigError("KV offload (offload_*_bytes) needs prefix_cache")
    if config.tensor_parallel_size > min(config.num_kv_heads, config.intermediate):
        raise ReferenceConfigError(
            f"option tensor_parallel_size ({config.tensor_parallel_size}) exceeds the "
            f"model's KV heads ({config.num_kv_heads}): every rank needs at least one"
        )
    if config.tensor_parallel_size > 1 and (config.offload_host_bytes or config.offload_disk_bytes):
        # The tiers would move the leader's heads only.
        raise ReferenceConfigError(
            "KV offload (offload_*_bytes) is not built for tensor_parallel_size > 1"
        )
    if config.sliding_window < 0:
        raise ReferenceConfigError(
            f"option sliding_window must be >= 0 (0: none), got {config.sliding_window}"
        )
    if 0 < config.sliding_window < config.kv_block_size:
        # A block must fill before its window layer lets go of it, so that every full
        # block can be cached with all its layers.
        raise ReferenceConfigError(
            f"option sliding_window ({config.sliding_window}) must be 0 or at least "
            f"kv_block_size ({config.kv_block_size})"
        )
    for name in ("attention_tile", "sliding_window"):
        if getattr(config, name) % config.kv_block_size:
            # Attention reads whole KV blocks into its tiles.
            raise ReferenceConfigError(
                f"option {name} ({getattr(config, name)}) must be a multiple of "
                f"kv_block_size ({config.kv_block_size})"
            )
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
    if config.rope_pairing not in ROPE_PAIRINGS:
        raise ReferenceConfigError(
            f"option rope_pairing must be one of {', '.join(ROPE_PAIRINGS)}, "
            f"got {config.rope_pairing!r}"
        )
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
