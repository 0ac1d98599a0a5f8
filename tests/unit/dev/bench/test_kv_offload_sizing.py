"""The KV-offload benchmark's sizing of the tiers, its clusters and its report."""

from __future__ import annotations

from pathlib import Path

from tandem.api.v1alpha1 import RoutingPolicy
from tandem.engines.reference.config import ReferenceModelConfig
from tandem.engines.simulated.config import render_simulated_options
from tandem.engines.simulated.engine import SimulatedEngine
from tandem.kv.events import Tier
from tandem.perf.model import compute_sequence_blocks
from tandem.tokenization import ByteTokenizer
from tandem_dev.bench.chat_fleet import WorkerCounts
from tandem_dev.bench.chat_workload import ChatWorkload
from tandem_dev.bench.kv_offload import (
    ROWS,
    WORKING_SET_FLOOR,
    RowResult,
    Sizing,
    choose_chats,
    cluster_spec,
    estimate_tokens,
    reference_workers,
    render,
    round_robin_return,
    simulated_workers,
    size_tiers,
)


def test_the_working_set_counts_the_shared_system_prompt_once() -> None:
    tokenizer = ByteTokenizer()
    one = ChatWorkload("You are terse.", (("Hi there.", "And then?"),))
    longest, working_set = estimate_tokens(one, tokenizer, "ok")
    assert longest == working_set  # one chat: its whole history is the working set
    two = ChatWorkload(one.system, (*one.conversations, ("Hello, a longer question.", "So?")))
    longest_two, working_set_two = estimate_tokens(two, tokenizer, "ok")
    assert longest_two > longest
    system = len(tokenizer.apply_chat_template([], add_generation_prompt=False))
    assert longest + longest_two > working_set_two > longest_two > system


def test_the_pool_holds_the_longest_prompt_and_the_disk_the_working_set() -> None:
    sizing = size_tiers(1_000, 9_001, 16, 2, 3)
    assert sizing.pool_tokens % 16 == 0 and sizing.pool_tokens >= 1_000 + 16
    assert sizing.host_tokens == 2 * sizing.pool_tokens
    assert sizing.disk_tokens % 16 == 0 and sizing.disk_tokens >= 9_001
    assert sizing.working_set_ratio == 9_001 / (3 * sizing.pool_tokens)


def test_chats_outgrow_the_fleet_and_move_between_its_workers_under_round_robin() -> None:
    # 0.25 of the floor a chat: 16 chats reach it, but share a factor with 4 workers.
    assert choose_chats(4, lambda chats: chats * WORKING_SET_FLOOR / 16) == 17
    assert choose_chats(3, lambda chats: chats * WORKING_SET_FLOOR / 16) == 16
    # Never fewer than the least: the working set may be ample from the start.
    assert choose_chats(2, lambda chats: 100.0) == 15
    assert choose_chats(3, lambda chats: 100.0) == 16
    assert [round_robin_return(chats, 4) for chats in (17, 18, 20)] == [4, 2, 1]


def test_rows_differ_only_in_routing_and_offload(tmp_path: Path) -> None:
    model = ReferenceModelConfig()
    sizing = size_tiers(1_000, 9_000, model.kv_block_size, 2, 3)
    workers = reference_workers(model, ByteTokenizer())
    specs = {row.label: cluster_spec(row, sizing, workers, tmp_path).spec for row in ROWS}
    for row in ROWS:
        spec = specs[row.label]
        assert spec.frontend.routing_policy is row.routing
        assert spec.decode.kv_cache.offload.enabled is row.offload
        assert spec.prefill.replicas == 0 and spec.decode.replicas == 3
        blocks = spec.engine.options.as_dict()["num_kv_blocks"]
        assert blocks == sizing.pool_tokens // model.kv_block_size * model.num_layers
    offload = specs[ROWS[0].label].decode.kv_cache.offload
    token_bytes = model.kv_token_bytes * model.num_layers
    # Whatever the disk tier cannot take (no NIXL here), the host tier does.
    assert offload.host_bytes + offload.disk_bytes == token_bytes * (
        sizing.host_tokens + sizing.disk_tokens
    )


def _result(index: int, ttft: float, computed: float, answer: str = "ok") -> RowResult:
    # Computing a token takes 1 ms; a 16-token host block comes back in 1.6 ms.
    seconds = {"computed": computed / 1000, "host": 3 * 0.0016}
    counts = WorkerCounts({"computed": computed, "cache": 10.0}, {}, {"host": 3.0}, seconds)
    samples = [(turn, ttft) for turn in range(2) for _ in range(3)]
    return RowResult(ROWS[index], samples, 600, 990, counts, [[answer, "ok"] for _ in range(3)])


def test_the_report_judges_both_targets_and_the_answers() -> None:
    sizing = Sizing(16, 1_024, 2_048, 9_216, 1_000, 9_000, 2)
    results = [_result(0, 1.0, 100.0), _result(1, 2.5, 900.0), _result(2, 1.5, 300.0, "no")]
    workers = reference_workers(ReferenceModelConfig(), ByteTokenizer())
    text = render(results, sizing, workers, (1.0, 2.0))
    assert text.count("\n| ") == 1 + len(ROWS)
    assert "4.4x a fleet's device pools" in text and "(990 as sent)" in text
    assert "Offload against none (both KV routing): TTFT p50 2.50x" in text
    assert "TTFT p50 1.50x" in text and "is not met here" in text and "is met here" in text
    assert "3 of 6 differ" in text
    assert (
        "Per prompt token, KV routing, offload's workers measured computing it at 1,000.0 µs, "
        "from host 100.0 µs (worth 0.90 of a computed token to the router)."
    ) in text
    assert "Greedy answers differ from the first row's in: round-robin, offload." in text
    # 3 chats on 2 workers: back every other turn, which 2 turns never reach.
    assert "each of a chat's 2 turns to another worker (3 chats on 2 workers)" in text
    assert RoutingPolicy.ROUND_ROBIN in {row.routing for row in ROWS}


def test_simulated_workers_get_a_pool_that_holds_the_longest_prompt(tmp_path: Path) -> None:
    workers = simulated_workers("gb200")
    assert workers.block == 32
    sizing = size_tiers(32_560, 366_551, workers.block, 2, 2)
    spec = cluster_spec(ROWS[0], sizing, workers, tmp_path).spec
    assert spec.engine.kind.value == "simulated" and spec.accelerator.profile.value == "gb200"
    engine = SimulatedEngine.from_options(
        render_simulated_options(
            spec.engine.options.as_dict(),
            model="gpt-oss-120b",
            accelerator=spec.accelerator.profile,
            tensor_parallel_size=1,
            offload=spec.decode.kv_cache.offload,
        )
    )
    # The longest prompt with its answer fits the pool, with the sliding-window layers'
    # blocks, and little more does.
    need = compute_sequence_blocks(engine.config.perf, engine.capacity, sizing.pool_tokens)
    assert need <= engine.capacity.blocks <= need + 1
    # The disk tier is modelled: it holds the working set whether or not NIXL is here.
    tiers = engine.config.offload_blocks(engine.capacity)
    assert tiers[Tier.DISK] * workers.block == sizing.disk_tokens
    assert tiers[Tier.HOST] * workers.block == sizing.host_tokens
