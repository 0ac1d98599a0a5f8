"""Numerics of the reference model: RoPE, grouped-query attention, sliding windows,
chunked/tiled prefill against a naive full-sequence forward pass."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest

from tandem.engines.base import SamplingParams
from tandem.engines.reference import ReferenceEngine, ReferenceModelConfig
from tandem.engines.reference.attention import apply_rope, attend, compute_rope
from tandem.engines.reference.kv_layout import compute_kept_range
from tandem.engines.reference.model import ReferenceModel

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
TinyConfigFactory = Callable[..., ReferenceModelConfig]
GREEDY = SamplingParams(max_tokens=4)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _rope_at(x: F32, position: int, theta: float = 10_000.0) -> F32:
    cos, sin = compute_rope(range(position, position + 1), x.shape[-1], theta)
    rotated: F32 = apply_rope(x[None, None, :], cos, sin)[0, 0]
    return rotated


@pytest.mark.parametrize(("m", "n", "shift"), [(0, 0, 5), (3, 11, 100), (1000, 17, 31_000)])
def test_rope_score_depends_only_on_relative_position(m: int, n: int, shift: int) -> None:
    q, k = _rng(m).standard_normal((2, 32), dtype=np.float32)
    before = float(_rope_at(q, m) @ _rope_at(k, n))
    after = float(_rope_at(q, m + shift) @ _rope_at(k, n + shift))
    assert after == pytest.approx(before, rel=1e-4, abs=1e-4)


def test_rope_preserves_norm_and_moves_vectors() -> None:
    x = _rng(1).standard_normal(32, dtype=np.float32)
    rotated = _rope_at(x, 9)
    assert np.linalg.norm(rotated) == pytest.approx(np.linalg.norm(x), rel=1e-5)
    assert not np.allclose(rotated, x)
    np.testing.assert_allclose(_rope_at(x, 0), x, rtol=1e-6)


def _naive_attention(
    queries: F32, query_start: int, keys: F32, values: F32, key_start: int, window: int | None
) -> F32:
    """Dense masked attention with KV heads repeated explicitly: the textbook form."""
    group = queries.shape[1] // keys.shape[1]
    keys_full = np.repeat(keys, group, axis=1).astype(np.float64)
    values_full = np.repeat(values, group, axis=1).astype(np.float64)
    scores = np.einsum("qhd,khd->hqk", queries.astype(np.float64), keys_full)
    scores /= np.sqrt(queries.shape[-1])
    q_pos = np.arange(query_start, query_start + queries.shape[0])[:, None]
    k_pos = np.arange(key_start, key_start + keys.shape[0])[None, :]
    visible = k_pos <= q_pos
    if window is not None:
        visible &= k_pos > q_pos - window
    scores = np.where(visible[None], scores, -np.inf)
    probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    out: F32 = np.einsum("hqk,khd->qhd", probs, values_full).astype(np.float32)
    return out


@pytest.mark.parametrize(
    ("num_queries", "query_start", "window", "tile"),
    [(1, 0, None, 8), (1, 99, None, 16), (37, 63, None, 16), (37, 63, 10, 7), (64, 0, 24, 64)],
)
def test_grouped_query_attention_matches_naive(
    num_queries: int, query_start: int, window: int | None, tile: int
) -> None:
    rng = _rng(num_queries + query_start)
    key_start = 0 if window is None else max(0, query_start - window + 1)
    num_keys = query_start + num_queries - key_start
    queries = rng.standard_normal((num_queries, 8, 16), dtype=np.float32)
    keys, values = rng.standard_normal((2, num_keys, 2, 16), dtype=np.float32)
    out = attend(queries, query_start, keys, values, key_start, window=window, tile=tile)
    assert out.shape == (num_queries, 8, 16)
    assert out.dtype == np.float32
    expected = _naive_attention(queries, query_start, keys, values, key_start, window)
    np.testing.assert_allclose(out, expected, rtol=2e-4, atol=2e-5)


def test_query_heads_share_their_kv_head() -> None:
    """Heads 0-3 read KV head 0 and heads 4-7 KV head 1: identical queries within a
    group give identical outputs; across groups they differ."""
    rng = _rng(3)
    query = rng.standard_normal((1, 1, 16), dtype=np.float32)
    queries = np.repeat(query, 8, axis=1)
    keys, values = rng.standard_normal((2, 5, 2, 16), dtype=np.float32)
    out = attend(queries, 4, keys, values, 0, window=None, tile=4)
    np.testing.assert_array_equal(out[0, 0], out[0, 3])
    np.testing.assert_array_equal(out[0, 4], out[0, 7])
    assert not np.allclose(out[0, 0], out[0, 4])


def test_keys_outside_the_window_have_no_influence() -> None:
    rng = _rng(4)
    window, query_start, num_queries = 6, 20, 5
    queries = rng.standard_normal((num_queries, 4, 8), dtype=np.float32)
    keys, values = rng.standard_normal((2, query_start + num_queries, 2, 8), dtype=np.float32)
    baseline = attend(queries, query_start, keys, values, 0, window=window, tile=4)
    stale = query_start - window + 1  # keys before this are outside every query's window
    keys[:stale] = rng.standard_normal(keys[:stale].shape, dtype=np.float32) * 1e3
    values[:stale] = rng.standard_normal(values[:stale].shape, dtype=np.float32) * 1e3
    np.testing.assert_array_equal(
        attend(queries, query_start, keys, values, 0, window=window, tile=4), baseline
    )
    keys[stale] += 1.0  # the oldest key the first query still sees: must matter
    changed = attend(queries, query_start, keys, values, 0, window=window, tile=4)
    assert not np.allclose(changed[0], baseline[0])


class _DictStore:
    """An unpaged KvStore keeping every position, for full-sequence forwards."""

    def __init__(self, num_layers: int, block_size: int = 8) -> None:
        self.block_size = block_size
        self.keys: list[list[F32]] = [[] for _ in range(num_layers)]
        self.values: list[list[F32]] = [[] for _ in range(num_layers)]

    def write(self, layer: int, start: int, keys: F32, values: F32) -> None:
        assert start == sum(len(k) for k in self.keys[layer])
        self.keys[layer].append(keys.copy())
        self.values[layer].append(values.copy())

    def gather(self, layer: int, blocks: range, out: F32) -> None:
        keys = np.concatenate(self.keys[layer])
        values = np.concatenate(self.values[layer])
        flat = out.reshape(-1, *out.shape[2:])
        flat[...] = 0.0
        begin = blocks.start * self.block_size
        stop = min(len(keys), blocks.stop * self.block_size)
        flat[: stop - begin, 0] = keys[begin:stop]
        flat[: stop - begin, 1] = values[begin:stop]


def _naive_forward(model: ReferenceModel, tokens: list[int]) -> tuple[F32, list[F32]]:
    """Whole-sequence forward with dense attention and a dense SwiGLU: logits of the
    last token and each layer's K/V as ``[tokens, 2, kv_heads, head_dim]``."""
    config, weights = model.config, model.weights
    heads, kv_heads, dim = config.num_heads, config.num_kv_heads, config.head_dim
    count = len(tokens)
    cos, sin = compute_rope(range(count), dim, config.rope_theta)

    def norm(x: F64, gain: F32) -> F64:
        normed: F64 = x / np.sqrt((x**2).mean(-1, keepdims=True) + config.rms_norm_eps) * gain
        return normed

    assert weights.embedding is not None
    hidden = weights.embedding[tokens].astype(np.float64)
    layer_kv: list[F32] = []
    for layer, w in enumerate(weights.layers):
        qkv = (norm(hidden, w.attn_norm) @ w.qkv.dense()).astype(np.float32)
        q = apply_rope(qkv[:, : heads * dim].reshape(count, heads, dim), cos, sin)
        k = apply_rope(
            qkv[:, heads * dim : (heads + kv_heads) * dim].reshape(count, kv_heads, dim), cos, sin
        )
        v = qkv[:, (heads + kv_heads) * dim :].reshape(count, kv_heads, dim)
        layer_kv.append(np.stack([k, v], axis=1))
        window = config.sliding_window if config.is_sliding(layer) else None
        attn = _naive_attention(q, 0, k, v, 0, window).reshape(count, heads * dim)
        hidden = hidden + attn @ w.out.dense()
        gate, up = np.split(norm(hidden, w.mlp_norm) @ w.gate_up[0].dense(), 2, axis=-1)
        hidden = hidden + (gate / (1 + np.exp(-gate)) * up) @ w.down[0].dense()
    logits = (norm(hidden[-1:], weights.final_norm) @ weights.unembedding.dense())[0]
    return logits.astype(np.float32), layer_kv


@pytest.mark.parametrize("length", [1, 7, 8, 9, 24, 25, 40, 41, 100, 163])
def test_chunked_paged_prefill_matches_naive_forward(
    tiny_config: TinyConfigFactory, length: int
) -> None:
    """Chunks of 40, tiles of 32, blocks of 8, window 24: the engine's cached K/V (read
    back through its KvLayout) and its first token agree with a dense forward pass."""
    engine = ReferenceEngine(tiny_config())
    config = engine.config
    prompt = [int(t) for t in _rng(length).integers(0, 256, length)]
    expected_logits, expected_kv = _naive_forward(engine.model, prompt)
    result = engine.prefill("r", prompt, GREEDY)
    assert result.first_token == int(np.argmax(expected_logits))

    region = np.frombuffer(engine.kv_regions()[0], dtype=np.uint8)
    ranges = iter(result.kv.ranges)
    for layer in range(config.num_layers):
        kept = compute_kept_range(config, layer, length)
        cached: list[F32] = []
        while sum(len(c) for c in cached) < len(kept):
            r = next(ranges)
            chunk = region[r.offset : r.offset + r.length].view(np.float32)
            cached.append(chunk.reshape(-1, 2, config.num_kv_heads, config.head_dim))
        np.testing.assert_allclose(
            np.concatenate(cached), expected_kv[layer][kept.start :], rtol=1e-3, atol=1e-4
        )
    assert next(ranges, None) is None


def test_whole_prompt_forward_matches_naive_logits(tiny_config: TinyConfigFactory) -> None:
    model = ReferenceModel(tiny_config())
    prompt = [int(t) for t in _rng(5).integers(0, 256, 90)]
    logits = model.forward(prompt, 0, _DictStore(model.config.num_layers))
    expected, _ = _naive_forward(model, prompt)
    np.testing.assert_allclose(logits, expected, rtol=1e-3, atol=1e-3)


def test_window_only_model_ignores_tokens_before_the_window(
    tiny_config: TinyConfigFactory,
) -> None:
    """One sliding-window layer: the next token's logits depend only on the last
    ``window`` tokens, however the older ones are changed."""
    model = ReferenceModel(tiny_config(num_layers=1))
    window = model.config.sliding_window
    prompt = [int(t) for t in _rng(6).integers(0, 256, 3 * window)]
    changed_old = [*((t + 1) % 256 for t in prompt[:-window]), *prompt[-window:]]
    changed_recent = [*prompt[:-window], (prompt[-window] + 1) % 256, *prompt[-window + 1 :]]

    def logits(tokens: list[int]) -> F32:
        return model.forward(tokens, 0, _DictStore(1))

    np.testing.assert_array_equal(logits(changed_old), logits(prompt))
    assert not np.allclose(logits(changed_recent), logits(prompt))


def test_full_attention_layer_sees_old_tokens(tiny_config: TinyConfigFactory) -> None:
    model = ReferenceModel(tiny_config(num_layers=2))
    window = model.config.sliding_window
    prompt = [int(t) for t in _rng(6).integers(0, 256, 3 * window)]
    changed_old = [(prompt[0] + 1) % 256, *prompt[1:]]
    a = model.forward(prompt, 0, _DictStore(2))
    b = model.forward(changed_old, 0, _DictStore(2))
    assert not np.allclose(a, b)


@pytest.mark.parametrize("experts", [0, 4])
def test_greedy_output_depends_on_the_prompt(tiny_config: TinyConfigFactory, experts: int) -> None:
    engine = ReferenceEngine(tiny_config(num_experts=experts, experts_per_token=2))
    firsts = set()
    for index in range(16):
        prompt = [int(t) for t in _rng(100 + index).integers(0, 256, 20)]
        firsts.add(engine.prefill(f"r{index}", prompt, GREEDY).first_token)
        engine.release(f"r{index}")
    assert len(firsts) >= 6


def test_mixture_of_experts_routes_tokens_to_different_experts(
    tiny_config: TinyConfigFactory,
) -> None:
    model = ReferenceModel(tiny_config(num_experts=8, experts_per_token=2))
    router = model.weights.layers[0].router
    assert router is not None
    hidden = model.weights.embed(list(range(256)))
    chosen = np.argsort(-router(hidden), axis=-1, kind="stable")[:, :2]
    assert len(np.unique(chosen)) == 8
    dense = ReferenceModel(tiny_config(num_experts=0))
    prompt = list(range(30))
    assert not np.allclose(
        model.forward(prompt, 0, _DictStore(2)), dense.forward(prompt, 0, _DictStore(2))
    )


def test_same_seed_same_weights_different_seed_different_weights() -> None:
    small = {"hidden": 32, "num_heads": 2, "num_kv_heads": 1, "head_dim": 16}
    a = ReferenceModel(ReferenceModelConfig.from_options({**small, "seed": 1}))
    b = ReferenceModel(ReferenceModelConfig.from_options({**small, "seed": 1}))
    c = ReferenceModel(ReferenceModelConfig.from_options({**small, "seed": 2}))
    np.testing.assert_array_equal(a.weights.layers[1].qkv.dense(), b.weights.layers[1].qkv.dense())
    np.testing.assert_array_equal(a.weights.unembedding.dense(), b.weights.unembedding.dense())
    assert not np.allclose(a.weights.unembedding.dense(), c.weights.unembedding.dense())
