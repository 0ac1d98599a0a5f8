"""Model architectures the capacity model knows: the shapes that decide KV and weight memory.

Figures for gpt-oss come from its model card and ``config.json`` (collected in
``shared/notes/stack-facts.md``): 36 / 24 layers alternating a 128-token sliding window
with full attention, 64 query heads, 8 KV heads of 64 dims, MXFP4 expert weights.
``weight_bytes`` is the checkpoint size, which is what TensorRT-LLM loads onto the GPUs
(MXFP4 experts stay MXFP4; attention and router weights are bf16).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

GIB = 1 << 30


class KvDtype(enum.StrEnum):
    """Element types a KV cache is stored in (TensorRT-LLM ``kv_cache_config.dtype``)."""

    FP32 = "fp32"  # the reference engine (numpy float32)
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"

    @property
    def nbytes(self) -> int:
        return _DTYPE_BYTES[self]


_DTYPE_BYTES = {KvDtype.FP32: 4, KvDtype.BF16: 2, KvDtype.FP16: 2, KvDtype.FP8: 1}

# Spellings engines and configs use for the same types.
_DTYPE_ALIASES = {
    "float32": KvDtype.FP32,
    "fp32": KvDtype.FP32,
    "bfloat16": KvDtype.BF16,
    "bf16": KvDtype.BF16,
    "float16": KvDtype.FP16,
    "fp16": KvDtype.FP16,
    "half": KvDtype.FP16,
    "fp8": KvDtype.FP8,
    "float8": KvDtype.FP8,
    "fp8_e4m3": KvDtype.FP8,
}


def parse_kv_dtype(name: str, *, native: KvDtype) -> KvDtype:
    """``"auto"`` means the model's own activation dtype (TensorRT-LLM's meaning)."""
    key = name.strip().lower()
    if key == "auto":
        return native
    try:
        return _DTYPE_ALIASES[key]
    except KeyError:
        known = ", ".join(sorted({"auto", *_DTYPE_ALIASES}))
        raise ValueError(f"unknown KV cache dtype {name!r}; known: {known}") from None


@dataclass(frozen=True, slots=True)
class ModelArchitecture:
    """A decoder-only transformer as far as memory is concerned."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    # Layers with sliding-window attention keep only the last ``sliding_window`` tokens.
    sliding_window: int | None
    sliding_layers: int
    num_experts: int
    experts_per_token: int
    total_params: int
    active_params: int
    weight_bytes: int
    max_context: int
    vocab_size: int
    native_kv_dtype: KvDtype = KvDtype.BF16
    # Expert weights in MXFP4 (gpt-oss): picks the MoE kernels in TensorRT-LLM.
    mxfp4_experts: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.sliding_layers <= self.num_layers:
            raise ValueError(f"{self.name}: sliding_layers must lie in [0, num_layers]")
        if self.sliding_layers and not self.sliding_window:
            raise ValueError(f"{self.name}: sliding layers need a sliding_window")

    @property
    def full_layers(self) -> int:
        return self.num_layers - self.sliding_layers

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0


# gpt-oss: even layers slide over 128 tokens, odd layers attend to everything, so half of
# the layers are windowed. Weight sizes are the published checkpoint sizes (~60.8 GiB and
# ~12.8 GiB); parameter counts from the model card.
GPT_OSS_120B = ModelArchitecture(
    name="gpt-oss-120b",
    num_layers=36,
    hidden_size=2880,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=64,
    sliding_window=128,
    sliding_layers=18,
    num_experts=128,
    experts_per_token=4,
    total_params=116_800_000_000,
    active_params=5_100_000_000,
    weight_bytes=int(60.8 * GIB),
    max_context=131_072,
    vocab_size=201_088,
    mxfp4_experts=True,
)

GPT_OSS_20B = ModelArchitecture(
    name="gpt-oss-20b",
    num_layers=24,
    hidden_size=2880,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=64,
    sliding_window=128,
    sliding_layers=12,
    num_experts=32,
    experts_per_token=4,
    total_params=20_900_000_000,
    active_params=3_600_000_000,
    weight_bytes=int(12.8 * GIB),
    max_context=131_072,
    vocab_size=201_088,
    mxfp4_experts=True,
)

# The reference engine's default shape (tandem.engines.reference.config): 4 layers,
# alternating window/full, 2 KV heads of 32 dims in float32. Its weights are tiny; what
# matters on a laptop is the KV pool, which the engine preallocates.
TANDEM_REFERENCE = ModelArchitecture(
    name="tandem-reference",
    num_layers=4,
    hidden_size=256,
    num_attention_heads=8,
    num_kv_heads=2,
    head_dim=32,
    sliding_window=128,
    sliding_layers=2,
    num_experts=0,
    experts_per_token=0,
    total_params=0,
    active_params=0,
    weight_bytes=0,
    max_context=131_072,
    vocab_size=262,
    native_kv_dtype=KvDtype.FP32,
)

ARCHITECTURES: Mapping[str, ModelArchitecture] = {
    m.name: m for m in (GPT_OSS_120B, GPT_OSS_20B, TANDEM_REFERENCE)
}


def find_architecture(model_name: str) -> ModelArchitecture | None:
    """The architecture for a model identifier such as ``openai/gpt-oss-120b``.

    Matches on the last path component, case-insensitively, so ``hf://openai/gpt-oss-20b``
    and ``gpt-oss-20b`` both resolve; unknown models return None.
    """
    return ARCHITECTURES.get(compute_model_key(model_name))


def compute_model_key(model_name: str) -> str:
    """What names one model: the identifier's last path component, lower-cased."""
    return model_name.rstrip("/").rsplit("/", 1)[-1].lower()
