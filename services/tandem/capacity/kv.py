"""KV cache sizes: exact analytical bytes, per-GPU shards and block-rounded allocations.

One token in one layer stores a key and a value per KV head:
``2 x kv_heads x head_dim x dtype bytes``. Full-attention layers keep every token;
sliding-window layers keep only the last ``sliding_window`` tokens. For gpt-oss-120b in
bf16 that is 2,048 B per token per layer, and a 32,768-token prompt holds
1,212,678,144 B (606,339,072 B in fp8) instead of ~2.4 GB without the window.
"""

from __future__ import annotations

import math

from tandem.capacity.models import KvDtype, ModelArchitecture


def kv_bytes_per_token_per_layer(model: ModelArchitecture, dtype: KvDtype) -> int:
    return 2 * model.num_kv_heads * model.head_dim * dtype.nbytes


def kv_token_layers(model: ModelArchitecture, tokens: int) -> int:
    """Token-layer slots a sequence of ``tokens`` occupies (window layers cap at the
    window)."""
    if tokens < 0:
        raise ValueError("tokens must be >= 0")
    windowed = min(tokens, model.sliding_window or 0)
    return model.full_layers * tokens + model.sliding_layers * windowed


def kv_bytes(model: ModelArchitecture, tokens: int, dtype: KvDtype | None = None) -> int:
    """Exact KV bytes of one sequence of ``tokens`` tokens across the whole model."""
    dtype = dtype or model.native_kv_dtype
    return kv_bytes_per_token_per_layer(model, dtype) * kv_token_layers(model, tokens)


def kv_heads_per_gpu(model: ModelArchitecture, tensor_parallel_size: int) -> int:
    """KV heads one tensor-parallel rank stores. TensorRT-LLM splits KV heads across TP
    ranks; beyond ``num_kv_heads`` ranks each rank keeps (a replica of) one head."""
    if tensor_parallel_size < 1:
        raise ValueError("tensor_parallel_size must be >= 1")
    return max(1, math.ceil(model.num_kv_heads / tensor_parallel_size))


def round_up(value: int, multiple: int) -> int:
    if multiple < 1:
        raise ValueError("multiple must be >= 1")
    return -(-value // multiple) * multiple


def kv_bytes_per_gpu(
    model: ModelArchitecture,
    tokens: int,
    *,
    dtype: KvDtype,
    tensor_parallel_size: int = 1,
    tokens_per_block: int | None = None,
) -> int:
    """KV bytes one GPU of a TP group holds for one sequence.

    With ``tokens_per_block`` the count is rounded up to whole KV blocks (what a paged
    allocator actually reserves): full layers round ``tokens``, window layers round the
    window they keep.
    """
    per_head = 2 * model.head_dim * dtype.nbytes
    heads = kv_heads_per_gpu(model, tensor_parallel_size)
    if tokens_per_block is None:
        return per_head * heads * kv_token_layers(model, tokens)
    windowed = min(tokens, model.sliding_window or 0)
    slots = model.full_layers * round_up(tokens, tokens_per_block) + (
        model.sliding_layers * round_up(windowed, tokens_per_block)
    )
    return per_head * heads * slots
