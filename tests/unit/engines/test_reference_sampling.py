"""Sampling reproducibility: the draw for position p depends only on (seed, p)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tandem.engines.base import SamplingParams
from tandem.engines.reference import ReferenceEngine, ReferenceModelConfig
from tandem.engines.reference.sampling import derive_seed, sample_token

TinyConfigFactory = Callable[..., ReferenceModelConfig]
LOGITS = np.array([2.0, 1.0, 0.5, -1.0, 1.9], dtype=np.float32)


def test_greedy_takes_the_first_maximum() -> None:
    logits = np.array([0.0, 3.0, 3.0, 1.0], dtype=np.float32)
    assert sample_token(logits, SamplingParams(max_tokens=1), seed=5, position=9) == 1


def test_draw_depends_only_on_seed_and_position() -> None:
    params = SamplingParams(max_tokens=1, temperature=1.0)
    draws = [sample_token(LOGITS, params, seed=11, position=p) for p in range(200)]
    again = [sample_token(LOGITS, params, seed=11, position=p) for p in reversed(range(200))]
    assert draws == list(reversed(again))
    other_seed = [sample_token(LOGITS, params, seed=12, position=p) for p in range(200)]
    assert draws != other_seed


def test_frequencies_follow_the_softmax() -> None:
    params = SamplingParams(max_tokens=1, temperature=0.7)
    counts = np.bincount(
        [sample_token(LOGITS, params, seed=1, position=p) for p in range(4000)], minlength=5
    )
    probs = np.exp(LOGITS / 0.7) / np.exp(LOGITS / 0.7).sum()
    np.testing.assert_allclose(counts / 4000, probs, atol=0.03)


def test_top_p_keeps_the_smallest_nucleus() -> None:
    probs = np.exp(LOGITS) / np.exp(LOGITS).sum()  # sorted: ids 0, 4, 1, 2, 3
    nucleus = probs[0] + probs[4] - 1e-6  # ids 0 and 4 reach it, id 0 alone does not
    params = SamplingParams(max_tokens=1, temperature=1.0, top_p=float(nucleus))
    drawn = {sample_token(LOGITS, params, seed=2, position=p) for p in range(500)}
    assert drawn == {0, 4}
    tiny = SamplingParams(max_tokens=1, temperature=1.0, top_p=1e-9)
    assert {sample_token(LOGITS, tiny, seed=2, position=p) for p in range(100)} == {0}


def test_negative_and_huge_seeds_are_accepted() -> None:
    params = SamplingParams(max_tokens=1, temperature=1.0)
    for seed in (-1, 2**70, 0):
        assert 0 <= sample_token(LOGITS, params, seed=seed, position=3) < 5


def test_derived_seed_is_stable() -> None:
    assert derive_seed("req-1") == derive_seed("req-1") != derive_seed("req-2")


@pytest.mark.parametrize("seed", [None, 42])
def test_split_prefill_and_decode_sample_like_one_process(
    tiny_config: TinyConfigFactory, seed: int | None
) -> None:
    """The first token is sampled by one engine and the rest by another: the draws
    line up with a single engine because each uses (seed, position) only. With no
    seed, both sides derive it from the request id."""
    params = SamplingParams(max_tokens=25, temperature=1.2, top_p=0.9, seed=seed)
    prompt = list(range(40, 100))

    def run(prefill: ReferenceEngine, decode: ReferenceEngine) -> list[int]:
        result = prefill.prefill("req", prompt, params)
        layout = (
            decode.reserve("req", prompt, result.first_token) if decode is not prefill else None
        )
        if layout is not None:
            source = prefill.kv_regions()[0]
            target = decode.kv_regions()[0]
            for src, dst in zip(result.kv.ranges, layout.ranges, strict=True):
                target[dst.offset : dst.offset + dst.length] = source[
                    src.offset : src.offset + src.length
                ]
            decode.commit("req")
        tokens = [result.first_token]
        for _ in range(params.max_tokens - 1):
            tokens.append(decode.step({"req": params})[0].token)
        return tokens

    single = ReferenceEngine(tiny_config())
    together = run(single, single)
    split = run(ReferenceEngine(tiny_config()), ReferenceEngine(tiny_config()))
    assert split == together
    assert len(set(together)) > 5  # genuinely sampled, not a constant
