"""The reference engine as a planner sees it: its model in the capacity model's terms,
its KV pool, and what fits that pool, each counted by hand."""

from __future__ import annotations

from tandem.capacity.kv import kv_bytes_per_gpu
from tandem.capacity.models import KvDtype
from tandem.engines.reference import ReferenceModelConfig
from tandem.engines.reference.shape import describe_worker, fits_pool
from tandem.engines.reference.weights import init_weights

MOE = ReferenceModelConfig.from_options(
    {
        "num_layers": 3, "hidden": 16, "num_heads": 4, "num_kv_heads": 2, "head_dim": 8,
        "intermediate": 24, "num_experts": 4, "experts_per_token": 2, "vocab_size": 300,
        "eos_token_id": 1, "sliding_window": 32, "kv_block_size": 8, "num_kv_blocks": 40,
        "max_batch_tokens": 20, "max_context": 4096,
    }
)  # fmt: skip


def test_the_model_and_pool_in_the_capacity_models_terms() -> None:
    worker = describe_worker(MOE, init_weights(MOE))
    arch = worker.architecture
    # Per layer: qkv 16 x (4 + 2 x 2) x 8 = 1024, out 32 x 16 = 512, router 16 x 4 = 64,
    # 4 experts of gate/up 16 x 48 + down 24 x 16 = 1152 each, two norms of 16.
    layer = 1024 + 512 + 64 + 4 * 1152 + 2 * 16
    # Embedding and unembedding 300 x 16 each, the final norm.
    assert arch.total_params == 3 * layer + 2 * 300 * 16 + 16
    # Two of four experts run per token: two experts' worth fewer in every layer.
    assert arch.active_params == arch.total_params - 2 * 1152 * 3
    # Layers 0 and 2 slide over 32 tokens (even layers, as gpt-oss alternates them).
    assert (arch.sliding_window, arch.sliding_layers, arch.full_layers) == (32, 2, 1)
    assert (arch.num_kv_heads, arch.head_dim, arch.native_kv_dtype) == (2, 8, KvDtype.FP32)
    assert (arch.num_experts, arch.experts_per_token, arch.max_context) == (4, 2, 4096)
    # 40 blocks of 8 tokens of one layer: K and V, 2 heads of 8 float32 each per token.
    assert worker.kv_pool_bytes == 40 * 8 * 2 * 2 * 8 * 4
    assert (worker.tokens_per_block, worker.max_num_tokens) == (8, 20)
    # The capacity model's bytes of a sequence are the engine's: all 100 tokens in the
    # full layer, the last 32 in each window layer.
    assert kv_bytes_per_gpu(arch, 100, dtype=KvDtype.FP32) == (100 + 2 * 32) * 2 * 2 * 8 * 4


def test_what_fits_the_pool() -> None:
    # 24 tokens and the decode token: 4 blocks in the full layer, 4 in each window layer
    # (positions 0..24 span blocks 0..3): 12 blocks a sequence, so three fit 40, four not.
    assert fits_pool(MOE, 3, 24)
    assert not fits_pool(MOE, 4, 24)
    # 300 tokens and one: 38 blocks in the full layer alone, and the window layers'.
    assert not fits_pool(MOE, 1, 300)
