"""The analytic clock against cases worked out by hand (toy numbers chosen so each term
is easy to follow), and gpt-oss-120b's KV transfers worked out by hand."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tandem.api.v1alpha1 import AcceleratorProfile
from tandem.capacity import GPT_OSS_120B, KvDtype, ModelArchitecture, gpu_for
from tandem.capacity.models import GIB
from tandem.perf.hardware import GpuPerformance, KvLink, LinkKind, performance_for
from tandem.perf.model import (
    Chunk,
    Efficiency,
    PerfModel,
    compute_allreduce_seconds,
    compute_attention_seconds,
    compute_attention_work,
    compute_decode_attention_work,
    compute_experts_touched,
    compute_kv_capacity,
    compute_kv_transfer_seconds,
    compute_linear_seconds,
    compute_prefill_seconds,
    compute_sequence_blocks,
    compute_step_seconds,
    compute_weight_split,
    sum_window_keys,
)

# 2 layers (one full, one with a 4-token window), 2 query heads and 1 KV head of 10 dims,
# 4 experts of which 2 are active; 1000 parameters (600 active) in 2000 bytes.
TOY = ModelArchitecture(
    name="toy",
    num_layers=2,
    hidden_size=100,
    num_attention_heads=2,
    num_kv_heads=1,
    head_dim=10,
    sliding_window=4,
    sliding_layers=1,
    num_experts=4,
    experts_per_token=2,
    total_params=1000,
    active_params=600,
    weight_bytes=2000,
    max_context=1000,
    vocab_size=10,
)
TOY_GPU = GpuPerformance(
    AcceleratorProfile.B200,
    hbm_bytes_per_second=1000.0,
    fp8_flops=1e4,
    bf16_flops=1e3,
    nvlink_bytes_per_second=100.0,
    kv_link=KvLink(LinkKind.RDMA_400G, 50.0, 0.5, 0.1),
    source="toy",
    host_link=KvLink(LinkKind.PCIE5_X16, 20.0, 0.5, 0.1),
    disk_link=KvLink(LinkKind.NVME, 5.0, 0.5, 0.1),
)
HALF = Efficiency(
    linear=0.5, attention=0.5, memory=0.5, layer_overhead_s=0.01, allreduce_latency_s=0.001
)


def toy(tp: int = 1) -> PerfModel:
    return PerfModel(TOY, TOY_GPU, tp, KvDtype.BF16, HALF)


def test_weight_split_and_experts_touched() -> None:
    # e = (1000 - 600) / (4 - 2) = 200 params per expert; dense = 1000 - 4 x 200 = 200
    # params = 400 bf16 bytes; experts share the other 1600 bytes: 400 each.
    split = compute_weight_split(TOY)
    assert (split.dense_bytes, split.expert_bytes) == (400.0, 400.0)
    # 4 x (1 - (1 - 2/4)^T): T=1 -> 2, T=2 -> 3, T=4 -> 3.75.
    assert [compute_experts_touched(TOY, t) for t in (0, 1, 2, 4)] == [0.0, 2.0, 3.0, 3.75]


def test_linear_time_is_the_slower_of_compute_and_weight_reads() -> None:
    # One token: 2 x 600 FLOPs / (1e4 x 0.5) = 0.24 s; bytes 400 + 2 x 400 = 1200 over
    # 1000 x 0.5 B/s = 2.4 s -> memory-bound.
    assert compute_linear_seconds(toy(), 1) == pytest.approx(2.4)
    # TP2 halves both: 1.2 s.
    assert compute_linear_seconds(toy(2), 1) == pytest.approx(1.2)
    # 100 tokens: 120,000 FLOPs / 5000 = 24 s vs ~(400 + 4 x 400) / 500 = 4 s -> compute.
    assert compute_linear_seconds(toy(), 100) == pytest.approx(24.0)


def test_window_keys_and_attention_work() -> None:
    # Queries with 4, 5, 6 keys under a 4-token window see 4 + 4 + 4 keys; with 1..6
    # keys: 1 + 2 + 3 + 4 + 4 + 4 = 18.
    assert sum_window_keys(4, 6, 4) == 12
    assert sum_window_keys(1, 6, 4) == 18
    assert sum_window_keys(1, 3, 4) == 6
    # A chunk of 3 tokens after 3 cached: full layer 4 + 5 + 6 = 15 keys, window layer
    # 12; 4 x 2 heads x 10 dims = 80 FLOPs per key -> 80 x 27 = 2160. KV read: 6 tokens
    # (full) + 4 (window) x 2 x 1 head x 10 dims x 2 bytes = 400 bytes.
    assert compute_attention_work(TOY, Chunk(3, 3), KvDtype.BF16) == (2160.0, 400.0)
    # A decode row after 5 tokens: 6 keys full, 4 windowed -> 800 FLOPs, 400 bytes.
    assert compute_attention_work(TOY, Chunk(5, 1), KvDtype.BF16) == (800.0, 400.0)
    # Attention grows with the cached context: the same 3 tokens after 30 cached cost
    # 80 x ((31 + 32 + 33) + 12) FLOPs.
    assert compute_attention_work(TOY, Chunk(30, 3), KvDtype.BF16)[0] == 80.0 * (96 + 12)


def test_step_time_adds_overhead_linear_attention_and_allreduce() -> None:
    # decode row [5] + chunk (3 cached, 3 new) = 4 tokens:
    #   overhead 2 layers x 0.01 = 0.02
    #   linear: 4800 FLOPs / 5000 = 0.96 vs (400 + 3.75 x 400) / 500 = 3.8 -> 3.8
    #   decode attention: 800 / (1e3 x 0.5) = 1.6 vs 400 / 500 = 0.8 -> 1.6
    #   prefill attention: 2160 / 500 = 4.32 vs 0.8 -> 4.32
    assert compute_step_seconds(toy(), [5], [Chunk(3, 3)]) == pytest.approx(9.74)
    assert compute_attention_seconds(toy(), [Chunk(3, 3)]) == pytest.approx(4.32)
    assert compute_step_seconds(toy(), [], []) == 0.0
    # TP2, one token: 2 all-reduces x 2 layers x (0.001 + 1 x 100 x 2 B x 2 x 1/2 / 100)
    assert compute_allreduce_seconds(toy(2), 1) == pytest.approx(4 * 2.001)
    assert compute_allreduce_seconds(toy(1), 1) == 0.0


def test_prefill_alone_is_the_sum_of_its_chunks() -> None:
    perf = toy()
    whole = compute_prefill_seconds(perf, 6, chunk_tokens=3)
    assert whole == pytest.approx(
        compute_step_seconds(perf, [], [Chunk(0, 3)])
        + compute_step_seconds(perf, [], [Chunk(3, 3)])
    )
    # The second chunk costs more than the first: it attends to the first one too.
    assert compute_step_seconds(perf, [], [Chunk(3, 3)]) > compute_step_seconds(
        perf, [], [Chunk(0, 3)]
    )


def test_kv_transfer_toy_and_gpt_oss_at_the_modelled_link_efficiency() -> None:
    # 6 tokens: 400 bytes over 50 x 0.5 B/s plus 0.1 s latency.
    assert compute_kv_transfer_seconds(toy(), 6) == pytest.approx(16.1)
    # gpt-oss-120b, 32,768 tokens in bf16 = 1,212,678,144 bytes:
    # one 400 Gb/s rail at 85%: 1,212,678,144 / 42.5e9 + 50 us = 28.58 ms;
    # NVLink 5 at 95% of 900 GB/s: / 855e9 + 10 us = 1.43 ms;
    # TP8 on B200, 8 rails: 1/8 of the bytes each: 3.62 ms.
    b200 = PerfModel(GPT_OSS_120B, performance_for(AcceleratorProfile.B200))
    gb200 = PerfModel(GPT_OSS_120B, performance_for(AcceleratorProfile.GB200))
    tp8 = PerfModel(GPT_OSS_120B, performance_for(AcceleratorProfile.B200), 8)
    assert compute_kv_transfer_seconds(b200, 32768) == pytest.approx(1_212_678_144 / 42.5e9 + 50e-6)
    assert compute_kv_transfer_seconds(gb200, 32768) == pytest.approx(1_212_678_144 / 855e9 + 10e-6)
    assert compute_kv_transfer_seconds(tp8, 32768) == pytest.approx(
        1_212_678_144 / 8 / 42.5e9 + 50e-6
    )


def test_kv_capacity_in_blocks_of_the_full_layers() -> None:
    perf = PerfModel(GPT_OSS_120B, performance_for(AcceleratorProfile.B200), 1, KvDtype.FP8)
    capacity = compute_kv_capacity(perf, gpu_for(AcceleratorProfile.B200))
    # A block: 32 tokens x 18 full layers x 8 KV heads x 64 dims x 2 (K, V) x 1 byte.
    assert capacity.block_bytes == 32 * 18 * 8 * 64 * 2
    assert capacity.blocks == capacity.pool_bytes // capacity.block_bytes
    # 33,792 tokens: 18 layers x 33,792 + 18 window layers x 128 = 18 x 33,920 token-layers
    # x 1024 bytes = 625,213,440 bytes = 1060 blocks of 589,824.
    assert compute_sequence_blocks(perf, capacity, 33792) == 1060
    assert compute_sequence_blocks(perf, capacity, 33793) == math.ceil(
        (18 * (33792 + 32) + 18 * 128) * 1024 / 589_824
    )


def test_a_model_whose_weights_do_not_fit_is_refused() -> None:
    heavy = dataclasses.replace(GPT_OSS_120B, weight_bytes=100 * GIB)
    perf = PerfModel(heavy, performance_for(AcceleratorProfile.H100))
    with pytest.raises(ValueError, match="more than the GPU holds"):
        compute_kv_capacity(perf, gpu_for(AcceleratorProfile.H100))


def test_decode_rows_summed_in_one_pass_equal_row_by_row() -> None:
    contexts = [0, 3, 5, 40]
    rows = [compute_attention_work(TOY, Chunk(c, 1), KvDtype.BF16) for c in contexts]
    assert compute_decode_attention_work(TOY, contexts, KvDtype.BF16) == (
        sum(f for f, _ in rows),
        sum(b for _, b in rows),
    )
