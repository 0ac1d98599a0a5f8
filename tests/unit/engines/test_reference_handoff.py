"""Disaggregation must not change a single token: prefill on engine A, copy A's KV
bytes into engine B's reserved ranges, decode on B == prefill and decode on A."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tandem.engines.base import KvLayout, SamplingParams
from tandem.engines.reference import ReferenceEngine, ReferenceModelConfig

CopyKv = Callable[[ReferenceEngine, KvLayout, ReferenceEngine, KvLayout], None]
Poison = Callable[[ReferenceEngine], None]
TinyConfigFactory = Callable[..., ReferenceModelConfig]

BOUNDARY_LENGTHS = [1, 2, 15, 16, 17, 31, 32, 33, 127, 128, 129, 143, 144, 145, 255, 256, 257]
BOUNDARY_LENGTHS += [511, 512, 513, 1023, 1024, 1025]
OUTPUT_TOKENS = 4


def _prompt(length: int, salt: int = 0) -> list[int]:
    return [int(t) for t in np.random.default_rng((length, salt)).integers(0, 256, length)]


def _decode(
    engine: ReferenceEngine, request_id: str, first: int, params: SamplingParams
) -> list[int]:
    tokens = [first]
    while True:
        (out,) = engine.step({request_id: params})
        tokens.append(out.token)
        if out.finish_reason is not None:
            return tokens


def _hand_off(
    prefill: ReferenceEngine,
    decode: ReferenceEngine,
    request_id: str,
    prompt: list[int],
    params: SamplingParams,
    copy_kv: CopyKv,
) -> tuple[list[int], list[int]]:
    """Returns (tokens decoded on ``prefill`` itself, tokens decoded on ``decode``)."""
    result = prefill.prefill(request_id, prompt, params)
    layout = decode.reserve(request_id, prompt, result.first_token)
    copy_kv(prefill, result.kv, decode, layout)
    decode.commit(request_id)
    local = _decode(prefill, request_id, result.first_token, params)
    remote = _decode(decode, request_id, result.first_token, params)
    prefill.release(request_id)
    decode.release(request_id)
    return local, remote


@pytest.fixture(scope="module")
def default_pair() -> tuple[ReferenceEngine, ReferenceEngine]:
    return ReferenceEngine(), ReferenceEngine()


@pytest.mark.parametrize("length", BOUNDARY_LENGTHS)
def test_default_model_handoff_is_bit_identical(
    default_pair: tuple[ReferenceEngine, ReferenceEngine],
    length: int,
    copy_kv: CopyKv,
    poison: Poison,
) -> None:
    prefill, decode = default_pair
    poison(decode)  # only transferred bytes are valid on the decode side
    params = SamplingParams(max_tokens=OUTPUT_TOKENS)
    local, remote = _hand_off(prefill, decode, f"r{length}", _prompt(length), params, copy_kv)
    assert len(local) == OUTPUT_TOKENS
    assert remote == local


@pytest.mark.parametrize("experts", [0, 4])
def test_random_lengths_with_sampling_hand_off_identically(
    tiny_config: TinyConfigFactory, experts: int, copy_kv: CopyKv, poison: Poison
) -> None:
    """Window 24 / blocks of 8 / chunks of 40, dense and MoE, sampled with a seed, long
    enough outputs that the window slides past the transferred tokens."""
    config = tiny_config(num_experts=experts, experts_per_token=2)
    prefill, decode = ReferenceEngine(config), ReferenceEngine(config)
    poison(decode)
    lengths = np.random.default_rng(experts).integers(1, 300, 30)
    for index, length in enumerate(lengths):
        params = SamplingParams(max_tokens=40, temperature=0.9, top_p=0.95, seed=index)
        local, remote = _hand_off(
            prefill, decode, f"r{index}", _prompt(int(length), 1), params, copy_kv
        )
        assert remote == local, f"prompt length {length}"
    assert decode.stats().kv_blocks_free == decode.stats().kv_blocks_total


def test_handoff_into_a_busy_decode_engine(tiny_config: TinyConfigFactory, copy_kv: CopyKv) -> None:
    """The decode engine already runs other sequences; the adopted one joins the batch
    and every sequence gets the tokens it would get alone."""
    prefill, decode = ReferenceEngine(tiny_config()), ReferenceEngine(tiny_config())
    alone = ReferenceEngine(tiny_config())
    params = SamplingParams(max_tokens=30)
    for name, length in (("x", 50), ("y", 7)):
        decode.prefill(name, _prompt(length), params)
    prompt = _prompt(90)
    result = prefill.prefill("z", prompt, params)
    layout = decode.reserve("z", prompt, result.first_token)
    copy_kv(prefill, result.kv, decode, layout)
    decode.commit("z")
    batched: dict[str, list[int]] = {"x": [], "y": [], "z": []}
    for _ in range(20):
        for out in decode.step(dict.fromkeys(batched, params)):
            batched[out.request_id].append(out.token)
    alone.prefill("z", prompt, params)
    alone.prefill("x", _prompt(50), params)
    for _ in range(20):
        for name in ("z", "x"):
            (out,) = alone.step({name: params})
            assert out.token == batched[name].pop(0)


def test_two_engines_with_the_same_seed_agree(tiny_config: TinyConfigFactory) -> None:
    params = SamplingParams(max_tokens=12, temperature=1.0, seed=3)
    outputs = []
    for _ in range(2):
        engine = ReferenceEngine(tiny_config())
        first = engine.prefill("r", _prompt(77), params).first_token
        outputs.append(_decode(engine, "r", first, params))
    assert outputs[0] == outputs[1]
    other = ReferenceEngine(tiny_config(seed=8))
    first = other.prefill("r", _prompt(77), params).first_token
    assert _decode(other, "r", first, params) != outputs[0]


def test_handoff_into_a_fragmented_pool(
    tiny_config: TinyConfigFactory, copy_kv: CopyKv, poison: Poison
) -> None:
    """Scattered physical blocks on the decode side (every other one taken) read the
    same K/V as the prefill side's contiguous run."""
    prefill, decode = ReferenceEngine(tiny_config()), ReferenceEngine(tiny_config())
    poison(decode)
    for index in range(40):
        decode.reserve(f"filler{index}", _prompt(8, index), 1)  # one block per layer
    for index in range(0, 40, 2):
        decode.release(f"filler{index}")
    params = SamplingParams(max_tokens=30, temperature=0.7, seed=9)
    prompt = _prompt(150, 2)
    result = prefill.prefill("r", prompt, params)
    layout = decode.reserve("r", prompt, result.first_token)
    blocks = sorted({r.offset // decode.config.kv_block_bytes for r in layout.ranges})
    assert blocks[-1] - blocks[0] + 1 > len(blocks)  # there are holes between them
    copy_kv(prefill, result.kv, decode, layout)
    decode.commit("r")
    assert _decode(decode, "r", result.first_token, params) == _decode(
        prefill, "r", result.first_token, params
    )
