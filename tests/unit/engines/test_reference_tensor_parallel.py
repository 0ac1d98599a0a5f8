"""Tensor parallelism in the reference engine: the shard plan, hand-worked; a TP2 group
(a follower rank in a thread, over the real TCP link) answering token for token as the
whole model does, alone, batched and from a cached prefix; its KV handed to a TP1 engine,
gathered into the whole layout, and a TP1 engine's split across its ranks; the link's
secret and a lost rank. Ray's placement of the
ranks is tested in tests/integration."""

from __future__ import annotations

import dataclasses
import socket
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from tandem.engines.base import EngineError, EngineLost, KvLayout, SamplingParams
from tandem.engines.reference import ReferenceConfigError, ReferenceEngine, ReferenceModelConfig
from tandem.engines.reference.tp import link as link_module
from tandem.engines.reference.tp.follower import FollowerRank
from tandem.engines.reference.tp.link import LeaderLink, RankLinkError
from tandem.engines.reference.tp.ray_ranks import RankGroup
from tandem.engines.reference.tp.shard import plan_shard, shard_config, shard_weights
from tandem.engines.reference.weights import ModelWeights, init_weights
from tandem.models import resolve_local_model_file
from tandem.tokenization import ChatMessage
from tandem.tokenization.gguf_tokenizer import load_gguf_tokenizer

from .conftest import SMOLLM2_SOURCE, TinyConfigFactory, generate, poison_kv

KvCopier = Callable[[ReferenceEngine, KvLayout, ReferenceEngine, KvLayout], None]

GREEDY = SamplingParams(max_tokens=12)
SECRET = bytes(range(32))
CHAT_QUESTIONS = ("What is the capital of France?", "Name three colours of the rainbow.")


class LocalGroup:
    """A leader engine and its followers, each follower serving in a thread."""

    def __init__(self, config: ReferenceModelConfig, weights: ModelWeights) -> None:
        followers = [
            FollowerRank(config, weights, rank) for rank in range(1, config.tensor_parallel_size)
        ]
        self.followers = followers
        ports = [follower.listen("127.0.0.1") for follower in followers]
        self.steps: list[int] = []
        self.threads = [
            threading.Thread(target=lambda f=f: self.steps.append(f.serve(SECRET)), daemon=True)
            for f in followers
        ]
        for thread in self.threads:
            thread.start()
        link = LeaderLink.connect([("127.0.0.1", port) for port in ports], SECRET)
        self.engine = ReferenceEngine(config, weights, RankGroup(link, ()))
        self.link = link

    def close(self) -> list[int]:
        self.link.close()
        for thread in self.threads:
            thread.join(timeout=10)
        return self.steps


@pytest.fixture
def local_group() -> Iterator[type[LocalGroup]]:
    groups: list[LocalGroup] = []

    class Tracked(LocalGroup):
        def __init__(self, config: ReferenceModelConfig, weights: ModelWeights) -> None:
            super().__init__(config, weights)
            groups.append(self)

    yield Tracked
    for group in groups:
        group.close()


def answer(engine: ReferenceEngine, request_id: str, prompt: list[int]) -> list[int]:
    return generate(engine, request_id, prompt, GREEDY)


def prompt(seed: int, length: int, vocab: int) -> list[int]:
    return np.random.default_rng(seed).integers(0, vocab, length).tolist()


def _range_values(engine: ReferenceEngine, layout: KvLayout) -> np.ndarray:
    regions = engine.kv_regions()
    parts = [regions[r.region][r.offset : r.offset + r.length] for r in layout.ranges]
    return np.frombuffer(b"".join(parts), dtype=np.float32)


def test_shard_plan_splits_smollm2_kv_groups_unevenly() -> None:
    # SmolLM2-135M: 9 query heads in 3 KV groups of 3, an MLP 1536 wide.
    config = ReferenceModelConfig(
        num_heads=9, num_kv_heads=3, head_dim=64, hidden=576, intermediate=1536
    )
    first, second = plan_shard(config, 0, 2), plan_shard(config, 1, 2)
    assert (first.kv_heads, first.heads, first.columns) == (range(0, 2), range(0, 6), range(0, 768))
    assert (second.kv_heads, second.heads, second.columns) == (
        range(2, 3),
        range(6, 9),
        range(768, 1536),
    )
    shard = shard_config(config, second)
    assert (shard.num_heads, shard.num_kv_heads, shard.intermediate) == (3, 1, 768)
    assert shard.tensor_parallel_size == 1


def test_shards_put_back_together_are_the_whole_weights(tiny_config: TinyConfigFactory) -> None:
    config = tiny_config(num_heads=6, num_kv_heads=3, head_dim=8, tensor_parallel_size=2)
    whole = init_weights(config)
    parts = [shard_weights(whole, config, plan_shard(config, rank, 2)) for rank in (0, 1)]
    layer, halves = whole.layers[0], [p.layers[0] for p in parts]
    q, kv = 6 * 8, 3 * 8
    # rank 0: heads 0-3 and KV head 0-1; rank 1: heads 4-5 and KV head 2.
    qkv = [h.qkv.dense() for h in halves]
    full = layer.qkv.dense()
    np.testing.assert_array_equal(full[:, :32], qkv[0][:, :32])
    np.testing.assert_array_equal(full[:, 32:q], qkv[1][:, :16])
    np.testing.assert_array_equal(full[:, q : q + 16], qkv[0][:, 32:48])
    np.testing.assert_array_equal(full[:, q + 16 : q + kv], qkv[1][:, 16:24])
    np.testing.assert_array_equal(full[:, q + kv : q + kv + 16], qkv[0][:, 48:])
    np.testing.assert_array_equal(full[:, q + kv + 16 :], qkv[1][:, 24:])
    np.testing.assert_array_equal(
        layer.out.dense(), np.concatenate([h.out.dense() for h in halves])
    )
    np.testing.assert_array_equal(
        layer.down[0].dense(), np.concatenate([h.down[0].dense() for h in halves])
    )


def test_tp2_answers_as_tp1_alone_batched_and_from_a_cached_prefix(
    tiny_config: TinyConfigFactory, local_group: type[LocalGroup]
) -> None:
    whole = tiny_config(num_heads=6, num_kv_heads=3, head_dim=8)
    split = tiny_config(num_heads=6, num_kv_heads=3, head_dim=8, tensor_parallel_size=2)
    weights = init_weights(whole)
    reference = ReferenceEngine(whole, weights)
    group = local_group(split, weights)
    prompts = [prompt(seed, 50 + 13 * seed, whole.vocab_size) for seed in range(3)]
    expected = [answer(reference, f"r{i}", p) for i, p in enumerate(prompts)]
    assert [answer(group.engine, f"a{i}", p) for i, p in enumerate(prompts)] == expected
    # The same prompts again come from the prefix cache: the follower's blocks of the
    # reused ids hold its heads of the same tokens.
    assert [answer(group.engine, f"b{i}", p) for i, p in enumerate(prompts)] == expected
    assert group.engine.stats().prompt_tokens_cached > 0
    # Batched: the three decode together, prefills chunked beside decode rows.
    for i, p in enumerate(prompts):
        group.engine.start_prefill(f"c{i}", [*p, 1], GREEDY)
    answers: dict[str, list[int]] = {f"c{i}": [] for i in range(3)}
    pending = dict.fromkeys(answers)
    while pending:
        running = {rid: GREEDY for rid in pending if answers[rid]}
        for output in group.engine.step(running):
            answers[output.request_id].append(output.token)
            if output.finish_reason is not None:
                del pending[output.request_id]
    alone = [answer(reference, f"d{i}", [*p, 1]) for i, p in enumerate(prompts)]
    assert [answers[f"c{i}"] for i in range(3)] == alone
    assert group.close()[0] > 0


def test_tp2_smollm2_matches_tp1_on_chat_prompts(
    smollm2: tuple[ReferenceModelConfig, ModelWeights], local_group: type[LocalGroup]
) -> None:
    # SmolLM2's 3 KV heads split 2 + 1: the uneven split on real weights.
    config, weights = smollm2
    group = local_group(dataclasses.replace(config, tensor_parallel_size=2), weights)
    reference = ReferenceEngine(config, weights)
    tokenizer = load_gguf_tokenizer(resolve_local_model_file(SMOLLM2_SOURCE))
    for i, question in enumerate(CHAT_QUESTIONS):
        ids = tokenizer.apply_chat_template([ChatMessage("user", question)])
        assert answer(group.engine, f"tp{i}", ids) == answer(reference, f"one{i}", ids)


def test_tensor_parallel_size_is_checked(tiny_config: TinyConfigFactory) -> None:
    with pytest.raises(ReferenceConfigError, match="tensor_parallel_size \\(3\\) exceeds"):
        tiny_config(tensor_parallel_size=3)  # 2 KV heads
    with pytest.raises(ReferenceConfigError, match="offload"):
        tiny_config(tensor_parallel_size=2, offload_host_bytes=1 << 20)
    with pytest.raises(EngineError, match="needs 1 follower rank"):
        ReferenceEngine(tiny_config(tensor_parallel_size=2))


def test_a_tp2_group_hands_its_kv_to_a_tp1_engine_in_the_whole_layout(
    tiny_config: TinyConfigFactory, local_group: type[LocalGroup], copy_kv: KvCopier
) -> None:
    # 3 KV heads split 2 + 1, window layers and blocks of 8: the gathered rows interleave
    # the ranks' heads, and only the kept tokens of each layer move.
    whole = tiny_config(num_heads=6, num_kv_heads=3, head_dim=8)
    split = dataclasses.replace(whole, tensor_parallel_size=2)
    weights = init_weights(whole)
    group = local_group(split, weights)
    decode, alone = ReferenceEngine(whole, weights), ReferenceEngine(whole, weights)
    poison_kv(decode)  # a byte the handoff misses turns the answer to NaN
    assert group.engine.info.kv_ranks == 2
    assert group.engine.config.digest() == whole.digest()
    prompts = [prompt(seed, 30 + 21 * seed, whole.vocab_size) for seed in range(3)]
    # Twice: the second time each prompt's blocks come from the group's prefix cache.
    for round_ in range(2):
        for i, ids in enumerate(prompts):
            rid = f"{round_}-{i}"
            result = group.engine.prefill(rid, ids, GREEDY)
            assert {r.region for r in result.kv.ranges} == {1}
            group.engine.gather_kv(rid)
            own = alone.prefill(rid, ids, GREEDY)
            assert result.first_token == own.first_token
            # The same bytes where a TP1 engine keeps them, but for rounding: the ranks'
            # partial sums are added in another order.
            np.testing.assert_allclose(
                _range_values(group.engine, result.kv), _range_values(alone, own.kv), atol=1e-5
            )
            layout = decode.reserve(rid, ids, result.first_token)
            copy_kv(group.engine, result.kv, decode, layout)
            decode.commit(rid)
            group.engine.release(rid)
            tokens = [result.first_token]
            while len(tokens) < GREEDY.max_tokens:
                (step,) = decode.step({rid: GREEDY})
                tokens.append(step.token)
            decode.release(rid)
            alone.release(rid)
            assert tokens == answer(alone, f"one-{rid}", ids)
    assert group.engine.stats().prompt_tokens_cached > 0


@pytest.mark.parametrize("window", [24, 0])
def test_a_tp2_group_takes_kv_a_tp1_engine_prefilled_split_across_its_ranks(
    tiny_config: TinyConfigFactory,
    local_group: type[LocalGroup],
    copy_kv: KvCopier,
    window: int,
) -> None:
    whole = tiny_config(num_heads=6, num_kv_heads=3, head_dim=8, sliding_window=window)
    weights = init_weights(whole)
    group = local_group(dataclasses.replace(whole, tensor_parallel_size=2), weights)
    prefill, alone = ReferenceEngine(whole, weights), ReferenceEngine(whole, weights)
    # Every rank's pool poisoned: a head the split misses turns the answer to NaN.
    poison_kv(group.engine)
    for follower in group.followers:
        follower._pool.fill(np.nan)
    prompts = [prompt(seed, 30 + 21 * seed, whole.vocab_size) for seed in range(3)]
    for i, ids in enumerate(prompts):
        rid = f"r{i}"
        result = prefill.prefill(rid, ids, GREEDY)
        layout = group.engine.reserve(rid, ids, result.first_token)
        assert {r.region for r in layout.ranges} == {1}
        copy_kv(prefill, result.kv, group.engine, layout)
        group.engine.commit(rid)
        prefill.release(rid)
        tokens = [result.first_token]
        while len(tokens) < GREEDY.max_tokens:
            (step,) = group.engine.step({rid: GREEDY})
            tokens.append(step.token)
        group.engine.release(rid)
        assert tokens == answer(alone, f"one-{rid}", ids)
    # Without window layers (whose early blocks never arrive) what arrived went into the
    # group's prefix cache, every rank's heads of it: a local prompt extending one reuses
    # those blocks and still answers as TP1.
    longer = [*prompts[2], 5, 6, 7]
    assert answer(group.engine, "local", longer) == answer(alone, "one-local", longer)
    assert (group.engine.stats().prompt_tokens_cached > 0) == (window == 0)


def test_only_a_prefilled_sequence_is_gathered(
    tiny_config: TinyConfigFactory, local_group: type[LocalGroup]
) -> None:
    config = tiny_config(tensor_parallel_size=2)
    group = local_group(config, init_weights(config))
    with pytest.raises(EngineError, match="no prefilled KV to gather"):
        group.engine.gather_kv("r")


def test_a_gather_from_a_lost_follower_fails_loudly(tiny_config: TinyConfigFactory) -> None:
    listener = socket.create_server(("127.0.0.1", 0))

    def accept_then_vanish_at_the_gather() -> None:
        conn, _ = listener.accept()
        conn.recv(8 + len(SECRET), socket.MSG_WAITALL)
        conn.sendall(len(b"ok").to_bytes(8, "big") + b"ok")
        conn.recv(8 + 1 + 4, socket.MSG_WAITALL)  # the gather of one block: then it dies
        conn.close()

    thread = threading.Thread(target=accept_then_vanish_at_the_gather, daemon=True)
    thread.start()
    link = LeaderLink.connect([("127.0.0.1", listener.getsockname()[1])], SECRET)
    with pytest.raises(RankLinkError, match="expected a KV share of 96 bytes, got nothing"):
        link.gather(np.array([3], dtype=np.int32), [96])
    thread.join(timeout=10)
    listener.close()


def test_a_follower_refuses_a_connection_without_the_secret(tiny_config: TinyConfigFactory) -> None:
    config = tiny_config(tensor_parallel_size=2)
    follower = FollowerRank(config, init_weights(config), 1)
    port = follower.listen("127.0.0.1")
    served: list[int] = []
    thread = threading.Thread(target=lambda: served.append(follower.serve(SECRET)), daemon=True)
    thread.start()
    with pytest.raises(RankLinkError, match="refused the group's secret"):
        LeaderLink.connect([("127.0.0.1", port)], b"x" * 32)
    # Still waiting for the leader: the right secret gets in.
    LeaderLink.connect([("127.0.0.1", port)], SECRET).close()
    thread.join(timeout=10)
    assert served == [0]


def test_a_silent_follower_fails_the_step_after_the_reduce_timeout(
    tiny_config: TinyConfigFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(link_module, "REDUCE_TIMEOUT_S", 0.5)
    config = tiny_config(tensor_parallel_size=2)
    listener = socket.create_server(("127.0.0.1", 0))
    hung = threading.Event()

    def accept_then_hang() -> None:  # a follower whose pod froze: connected, silent
        conn, _ = listener.accept()
        conn.recv(64)
        conn.sendall(len(b"ok").to_bytes(8, "big") + b"ok")
        hung.wait(30)
        conn.close()

    thread = threading.Thread(target=accept_then_hang, daemon=True)
    thread.start()
    link = LeaderLink.connect([("127.0.0.1", listener.getsockname()[1])], SECRET)
    engine = ReferenceEngine(config, init_weights(config), RankGroup(link, ()))
    with pytest.raises(RankLinkError, match=r"sent nothing for 0\.5 s"):
        engine.prefill("r", [1, 2, 3, 4], GREEDY)
    assert isinstance(RankLinkError("x"), EngineLost)  # the worker restarts on it
    hung.set()
    thread.join(timeout=10)
    listener.close()


def test_a_lost_follower_fails_the_step_loudly(tiny_config: TinyConfigFactory) -> None:
    config = tiny_config(tensor_parallel_size=2)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def accept_then_vanish() -> None:
        conn, _ = listener.accept()
        conn.recv(64)
        conn.sendall(len(b"ok").to_bytes(8, "big") + b"ok")
        conn.close()  # the rank's pod is gone

    thread = threading.Thread(target=accept_then_vanish, daemon=True)
    thread.start()
    link = LeaderLink.connect([("127.0.0.1", port)], SECRET)
    thread.join(timeout=10)
    engine = ReferenceEngine(config, init_weights(config), RankGroup(link, ()))
    with pytest.raises(RankLinkError, match=r"rank 1 at 127\.0\.0\.1"):
        engine.prefill("r", [1, 2, 3, 4], GREEDY)
    listener.close()
