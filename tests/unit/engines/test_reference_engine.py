"""ReferenceEngine lifecycle: finish reasons, request validation, state errors."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from threadpoolctl import threadpool_info  # type: ignore[import-untyped]

from tandem.engines.base import Engine, EngineError, FinishReason, SamplingParams
from tandem.engines.reference import ReferenceEngine, ReferenceModelConfig
from tandem.tokenization import ByteTokenizer

TinyConfigFactory = Callable[..., ReferenceModelConfig]
PROMPT = [int(t) for t in np.random.default_rng(0).integers(0, 256, 30)]


def test_engine_satisfies_the_protocol_and_describes_itself() -> None:
    engine: Engine = ReferenceEngine()
    tokenizer = ByteTokenizer()
    assert engine.info.vocab_size == tokenizer.vocab_size
    assert engine.info.eos_token_id == tokenizer.eos_token_id
    assert engine.info.kv_block_size == 16
    assert engine.info.max_context >= 32_768
    assert engine.info.extra["engine"] == "reference"
    assert engine.info.extra["config_digest"] == ReferenceModelConfig().digest()


def test_config_digest_ignores_pool_size_but_not_weights() -> None:
    base = ReferenceModelConfig()
    assert ReferenceModelConfig(num_kv_blocks=7).digest() == base.digest()
    assert ReferenceModelConfig(seed=1).digest() != base.digest()
    assert ReferenceModelConfig(kv_block_size=32).digest() != base.digest()


def test_max_tokens_one_finishes_at_prefill(tiny_config: TinyConfigFactory) -> None:
    engine = ReferenceEngine(tiny_config())
    result = engine.prefill("r", PROMPT, SamplingParams(max_tokens=1))
    assert result.finish_reason is FinishReason.LENGTH
    with pytest.raises(EngineError, match="already finished"):
        engine.step({"r": SamplingParams(max_tokens=1)})


def test_max_tokens_counts_the_first_token(tiny_config: TinyConfigFactory) -> None:
    engine = ReferenceEngine(tiny_config())
    params = SamplingParams(max_tokens=5)
    assert engine.prefill("r", PROMPT, params).finish_reason is None
    outs = [engine.step({"r": params})[0] for _ in range(4)]
    assert [o.finish_reason for o in outs] == [None, None, None, FinishReason.LENGTH]


def test_stop_token_ends_with_stop(tiny_config: TinyConfigFactory) -> None:
    engine = ReferenceEngine(tiny_config())
    greedy = SamplingParams(max_tokens=20)
    first = engine.prefill("probe", PROMPT, greedy).first_token
    second = engine.step({"probe": greedy})[0].token
    result = engine.prefill("r", PROMPT, SamplingParams(max_tokens=20, stop_token_ids=(first,)))
    assert (result.first_token, result.finish_reason) == (first, FinishReason.STOP)
    stop_second = SamplingParams(max_tokens=20, stop_token_ids=(second,))
    engine.prefill("s", PROMPT, stop_second)
    if second != first:
        (out,) = engine.step({"s": stop_second})
        assert (out.token, out.finish_reason) == (second, FinishReason.STOP)


def test_eos_token_ends_with_stop(tiny_config: TinyConfigFactory) -> None:
    probe = ReferenceEngine(tiny_config())
    first = probe.prefill("r", PROMPT, SamplingParams(max_tokens=2)).first_token
    engine = ReferenceEngine(tiny_config(eos_token_id=first))
    assert engine.prefill("r", PROMPT, SamplingParams(max_tokens=9)).finish_reason is (
        FinishReason.STOP
    )


def test_context_limit_ends_with_length(tiny_config: TinyConfigFactory) -> None:
    engine = ReferenceEngine(tiny_config(max_context=33))
    params = SamplingParams(max_tokens=100)
    assert engine.prefill("r", PROMPT, params).finish_reason is None  # 31 tokens
    (out,) = engine.step({"r": params})  # 32 tokens
    assert out.finish_reason is None
    (out,) = engine.step({"r": params})  # 33 tokens: the context is full
    assert out.finish_reason is FinishReason.LENGTH
    with pytest.raises(EngineError, match="no room"):
        engine.prefill("long", PROMPT + PROMPT[:3], params)


@pytest.mark.parametrize(
    ("prompt", "params", "message"),
    [
        ([], SamplingParams(max_tokens=1), "at least one token"),
        ([1, 999], SamplingParams(max_tokens=1), "token ids"),
        ([1, -1], SamplingParams(max_tokens=1), "token ids"),
        ([1], SamplingParams(max_tokens=0), "max_tokens"),
        ([1], SamplingParams(max_tokens=1, temperature=-1.0), "temperature"),
        ([1], SamplingParams(max_tokens=1, top_p=0.0), "top_p"),
        ([1], SamplingParams(max_tokens=1, temperature=float("nan")), "temperature"),
    ],
)
def test_prefill_rejects_bad_requests(
    tiny_config: TinyConfigFactory, prompt: list[int], params: SamplingParams, message: str
) -> None:
    engine = ReferenceEngine(tiny_config())
    with pytest.raises(EngineError, match=message):
        engine.prefill("r", prompt, params)
    assert engine.stats().kv_blocks_free == engine.stats().kv_blocks_total


def test_request_state_errors(tiny_config: TinyConfigFactory) -> None:
    engine = ReferenceEngine(tiny_config())
    params = SamplingParams(max_tokens=4)
    engine.prefill("r", PROMPT, params)
    with pytest.raises(EngineError, match="already holds KV"):
        engine.prefill("r", PROMPT, params)
    with pytest.raises(EngineError, match="already holds KV"):
        engine.reserve("r", PROMPT, 1)
    with pytest.raises(EngineError, match="unknown request"):
        engine.step({"nope": params})
    with pytest.raises(EngineError, match="no reserved KV"):
        engine.commit("r")
    with pytest.raises(EngineError, match="no reserved KV"):
        engine.commit("nope")
    engine.reserve("d", PROMPT, 1)
    with pytest.raises(EngineError, match="not committed"):
        engine.step({"d": params})
    with pytest.raises(EngineError, match="token ids"):
        engine.reserve("bad", PROMPT, engine.info.vocab_size)
    engine.commit("d")
    assert [o.request_id for o in engine.step({"d": params, "r": params})] == ["d", "r"]


def test_released_id_can_be_reused(tiny_config: TinyConfigFactory) -> None:
    engine = ReferenceEngine(tiny_config())
    params = SamplingParams(max_tokens=3)
    first = engine.prefill("r", PROMPT, params).first_token
    engine.release("r")
    assert engine.prefill("r", PROMPT, params).first_token == first


def test_engine_pins_blas_threads(tiny_config: TinyConfigFactory) -> None:
    """BLAS may sum in a different order with another thread count; pinning it makes
    a prefill process and a decode process compute the same bits."""
    ReferenceEngine(tiny_config(blas_threads=1))
    blas = [pool for pool in threadpool_info() if pool["user_api"] == "blas"]
    assert blas
    assert all(pool["num_threads"] == 1 for pool in blas)
