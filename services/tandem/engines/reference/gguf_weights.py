"""A llama-architecture GGUF file -> the reference model's architecture and weights.

Read with llama.cpp's own ``gguf`` package (``GGUFReader`` for metadata and tensors,
``gguf.quants.dequantize`` for Q4_1/Q8_0/... blocks), never a hand-written parser. The
architecture, vocabulary size, end-of-sequence id and context length come from the
file's metadata; weights are dequantized to float32 one tensor at a time. GGUF stores a
matrix as ``[out, in]`` rows (``ggml`` lists the dimensions the other way round), and
llama.cpp permuted the Q/K rows so that RoPE rotates adjacent pairs. A file without
``output.weight`` ties the output projection to the token embedding.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from gguf import GGUFReader, ReaderTensor
from gguf.quants import dequantize

from tandem.engines.base import EngineError
from tandem.engines.reference.config import ReferenceModelConfig
from tandem.engines.reference.linear import Linear
from tandem.engines.reference.weights import LayerWeights, ModelWeights

logger = logging.getLogger(__name__)

Float32Array = npt.NDArray[np.float32]

SUPPORTED_ARCHITECTURES = ("llama",)


class GgufModelError(EngineError):
    """The model file cannot be served by the reference engine; the message names it."""


def open_gguf(path: Path) -> GGUFReader:
    try:
        return GGUFReader(path)
    except Exception as exc:  # the reader raises whatever a truncated or foreign file trips
        raise GgufModelError(f"model file {path} is not a readable GGUF file: {exc}") from exc


def read_architecture(reader: GGUFReader, path: Path) -> dict[str, object]:
    """The architecture fields of ``ReferenceModelConfig``, from the file's metadata."""
    field = _field_reader(reader, path)
    arch = field("general.architecture", str)
    if arch not in SUPPORTED_ARCHITECTURES:
        raise GgufModelError(
            f"model file {path}: architecture {arch!r} is not supported by the reference "
            f"engine (supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
        )
    scaling = field(f"{arch}.rope.scaling.type", str, "none")
    if scaling not in ("none", ""):
        raise GgufModelError(f"model file {path}: RoPE scaling {scaling!r} is not supported")
    if field(f"{arch}.expert_count", int, 0):
        raise GgufModelError(f"model file {path}: mixture-of-experts GGUF models are not supported")
    hidden = field(f"{arch}.embedding_length", int)
    heads = field(f"{arch}.attention.head_count", int)
    head_dim = field(f"{arch}.attention.key_length", int, hidden // max(1, heads))
    rotary = field(f"{arch}.rope.dimension_count", int, head_dim)
    if rotary != head_dim:
        raise GgufModelError(
            f"model file {path}: partial rotary embeddings ({rotary} of {head_dim} "
            "dimensions) are not supported"
        )
    vocab = (
        field(f"{arch}.vocab_size", int, 0) or _tensor(reader, "token_embd.weight", path).shape[-1]
    )
    return {
        "model_name": field("general.name", str, path.stem),
        "num_layers": field(f"{arch}.block_count", int),
        "hidden": hidden,
        "num_heads": heads,
        "num_kv_heads": field(f"{arch}.attention.head_count_kv", int, heads),
        "head_dim": head_dim,
        "sliding_window": 0,
        "num_experts": 0,
        "intermediate": field(f"{arch}.feed_forward_length", int),
        "vocab_size": int(vocab),
        "eos_token_id": field("tokenizer.ggml.eos_token_id", int),
        "max_context": field(f"{arch}.context_length", int),
        "rope_theta": float(field(f"{arch}.rope.freq_base", float, 10_000.0)),
        "rope_pairing": "adjacent",
        "rms_norm_eps": float(field(f"{arch}.attention.layer_norm_rms_epsilon", float)),
        "weights_digest": _file_digest(path),
    }


def read_weights(reader: GGUFReader, config: ReferenceModelConfig, path: Path) -> ModelWeights:
    """Dequantized float32 weights in the reference model's layout (one tensor at a time,
    so the peak is the weights plus one tensor)."""
    tile = config.row_tile
    hidden = config.hidden
    attn = config.num_heads * config.head_dim
    kv = config.num_kv_heads * config.head_dim

    def matrix(name: str, rows: int, cols: int) -> Float32Array:
        """``[out=rows, in=cols]`` as stored."""
        return _dequantized(reader, name, (rows, cols), path)

    def vector(name: str) -> Float32Array:
        return _dequantized(reader, name, (hidden,), path)

    layers = []
    for i in range(config.num_layers):
        prefix = f"blk.{i}"
        qkv = np.concatenate(
            [
                matrix(f"{prefix}.attn_q.weight", attn, hidden),
                matrix(f"{prefix}.attn_k.weight", kv, hidden),
                matrix(f"{prefix}.attn_v.weight", kv, hidden),
            ]
        )
        gate_up = np.concatenate(
            [
                matrix(f"{prefix}.ffn_gate.weight", config.intermediate, hidden),
                matrix(f"{prefix}.ffn_up.weight", config.intermediate, hidden),
            ]
        )
        layers.append(
            LayerWeights(
                attn_norm=vector(f"{prefix}.attn_norm.weight"),
                qkv=Linear(qkv.T, tile),
                out=Linear(matrix(f"{prefix}.attn_output.weight", hidden, attn).T, tile),
                mlp_norm=vector(f"{prefix}.ffn_norm.weight"),
                router=None,
                gate_up=(Linear(gate_up.T, tile),),
                down=(
                    Linear(
                        matrix(f"{prefix}.ffn_down.weight", hidden, config.intermediate).T, tile
                    ),
                ),
            )
        )
    tied = _find_tensor(reader, "output.weight") is None
    embedding = matrix("token_embd.weight", config.vocab_size, hidden)
    output = embedding if tied else matrix("output.weight", config.vocab_size, hidden)
    return ModelWeights(
        embedding=None if tied else embedding,
        layers=tuple(layers),
        final_norm=vector("output_norm.weight"),
        unembedding=Linear(output.T, tile),
    )


def _field_reader(reader: GGUFReader, path: Path) -> Callable[..., Any]:
    missing = object()

    def field(key: str, kind: type, default: object = missing) -> Any:
        entry = reader.fields.get(key)
        if entry is None:
            if default is missing:
                raise GgufModelError(f"model file {path}: metadata {key!r} is missing")
            return default
        try:
            value = entry.contents()
        except Exception as exc:
            raise GgufModelError(
                f"model file {path}: metadata {key!r} is unreadable: {exc}"
            ) from exc
        if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise GgufModelError(
                f"model file {path}: metadata {key!r} should be {kind.__name__}, got {value!r}"
            )
        return value

    return field


def _find_tensor(reader: GGUFReader, name: str) -> ReaderTensor | None:
    return next((t for t in reader.tensors if t.name == name), None)


def _tensor(reader: GGUFReader, name: str, path: Path) -> ReaderTensor:
    tensor = _find_tensor(reader, name)
    if tensor is None:
        raise GgufModelError(f"model file {path}: tensor {name!r} is missing")
    return tensor


def _dequantized(reader: GGUFReader, name: str, shape: tuple[int, ...], path: Path) -> Float32Array:
    tensor = _tensor(reader, name, path)
    try:
        values = dequantize(tensor.data, tensor.tensor_type)
    except Exception as exc:  # NotImplementedError for a quantization gguf cannot expand
        raise GgufModelError(
            f"model file {path}: tensor {name!r} ({tensor.tensor_type.name}) cannot be "
            f"dequantized: {exc}"
        ) from exc
    if tuple(values.shape) != shape:
        raise GgufModelError(
            f"model file {path}: tensor {name!r} has shape {tuple(values.shape)}, "
            f"the metadata implies {shape}"
        )
    return np.asarray(values, dtype=np.float32)


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()
