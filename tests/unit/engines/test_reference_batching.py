"""Batched engine steps: a sequence's tokens (and logits, bit for bit) do not depend on
what else runs in its steps, how its prompt is chunked, or on reusing a cached prefix;
a long prefill advances between decode steps instead of stalling them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tandem.engines.base import KvCapacityError, KvLayout, SamplingParams, StepOutput
from tandem.engines.priority import FIRST_TOKENS
from tandem.engines.reference import ReferenceEngine, ReferenceModelConfig
from tandem.engines.reference.kv_layout import compute_prefill_peak_blocks
from tandem.engines.reference.kv_pool import KvPool, SequenceKv
from tandem.engines.reference.model import ReferenceModel, Segment
from tandem.engines.reference.step_plan import compute_attention_tokens, plan_prefill_chunks

from .conftest import TINY_OPTIONS

TinyConfigFactory = Callable[..., ReferenceModelConfig]
GREEDY = SamplingParams(max_tokens=4)


@dataclass(frozen=True)
class Request:
    name: str
    prompt: list[int]
    sampling: SamplingParams
    arrival: int  # the engine step before which it is queued


def run_alone(config: ReferenceModelConfig, request: Request) -> list[int]:
    """A fresh engine (empty cache), the whole prompt at once, then one step at a time."""
    engine = ReferenceEngine(config)
    result = engine.prefill(request.name, request.prompt, request.sampling)
    tokens = [result.first_token]
    finish = result.finish_reason
    while finish is None:
        (out,) = engine.step({request.name: request.sampling})
        tokens.append(out.token)
        finish = out.finish_reason
    return tokens


def run_together(config: ReferenceModelConfig, requests: list[Request]) -> dict[str, list[int]]:
    """One engine: requests queued as they arrive, every step over all of them,
    finished ones released at once (their blocks stay cached for later arrivals)."""
    engine = ReferenceEngine(config)
    tokens: dict[str, list[int]] = {r.name: [] for r in requests}
    by_name = {r.name: r for r in requests}
    prefilling: set[str] = set()
    decoding: dict[str, SamplingParams] = {}
    waiting = sorted(requests, key=lambda r: r.arrival)
    for step in range(10_000):
        if not (waiting or prefilling or decoding):
            return tokens
        while waiting and waiting[0].arrival <= step:
            request = waiting.pop(0)
            engine.start_prefill(request.name, request.prompt, request.sampling)
            prefilling.add(request.name)
        outputs: list[StepOutput] = engine.step(dict(decoding))
        for out in outputs:
            tokens[out.request_id].append(out.token)
            prefilling.discard(out.request_id)
            if out.finish_reason is not None:
                decoding.pop(out.request_id, None)
                engine.release(out.request_id)
            elif out.prefill is not None:
                decoding[out.request_id] = by_name[out.request_id].sampling
    raise AssertionError("the requests never finished")


prompt_tokens = st.lists(st.integers(0, 255), min_size=1, max_size=70)


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[Request], int, int, int]:
    shared = draw(st.lists(st.integers(0, 255), max_size=40))  # a common system prompt
    requests = []
    for index in range(draw(st.integers(1, 5))):
        prompt = shared[: draw(st.integers(0, len(shared)))] + draw(prompt_tokens)
        sampling = SamplingParams(
            max_tokens=draw(st.integers(1, 12)),
            temperature=draw(st.sampled_from([0.0, 0.0, 0.9])),
            seed=index,
        )
        requests.append(Request(f"r{index}", prompt, sampling, draw(st.integers(0, 8))))
    budget, idle_chunk = draw(st.integers(1, 48)), draw(st.integers(1, 100))
    return requests, budget, idle_chunk, draw(st.sampled_from([0, 4]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_any_batch_gives_each_sequence_its_tokens_alone(
    workload: tuple[list[Request], int, int, int],
) -> None:
    """Property: whatever requests share the steps, whenever they arrive, whatever the
    step budgets (so however the prompts are chunked) and whatever prefix they reuse from
    the cache, every request gets exactly the tokens it gets alone on a fresh engine."""
    requests, budget, idle_chunk, experts = workload
    options = {**TINY_OPTIONS, "num_experts": experts, "experts_per_token": 2}
    together = run_together(
        ReferenceModelConfig.from_options(
            {**options, "max_batch_tokens": budget, "prefill_chunk": idle_chunk}
        ),
        requests,
    )
    alone_config = ReferenceModelConfig.from_options(options)
    for request in requests:
        assert together[request.name] == run_alone(alone_config, request), request


def test_a_rows_logits_do_not_depend_on_its_batch(tiny_config: TinyConfigFactory) -> None:
    """Bit for bit: the logits of a decode row and of a prompt's last token are the same
    alone and next to other sequences' decode rows and prefill chunks."""
    config = tiny_config(num_kv_blocks=2048)
    model = ReferenceModel(config)
    rng = np.random.default_rng(3)
    prompts = [rng.integers(0, 256, n).tolist() for n in (37, 5, 90, 16)]

    def logits(batch: list[int]) -> list[np.ndarray]:
        """Prefill every prompt of ``batch`` in one forward, then one decode row each."""
        pool = KvPool(config)
        kvs = [SequenceKv(pool, config.num_layers) for _ in batch]
        first = []
        for index, kv in zip(batch, kvs, strict=True):
            for layer in range(config.num_layers):
                kv.cover(layer, range(len(prompts[index]) + 1))
        first = list(
            model.forward_batch(
                [Segment(prompts[i], 0, kv) for i, kv in zip(batch, kvs, strict=True)]
            )
        )
        second = model.forward_batch(
            [Segment([7], len(prompts[i]), kv) for i, kv in zip(batch, kvs, strict=True)]
        )
        return [*first, *second]

    together = logits([0, 1, 2, 3])
    for position, index in enumerate([0, 1, 2, 3]):
        alone_first, alone_second = logits([index])
        np.testing.assert_array_equal(together[position], alone_first)
        np.testing.assert_array_equal(together[4 + position], alone_second)


def test_a_long_prefill_runs_in_chunks_between_decode_rows(tiny_config: TinyConfigFactory) -> None:
    """Budget 16: four decoding sequences take 4 rows of each step, a queued 300-token
    prompt what its attention leaves of the other 12 (``step_plan``); every step still
    gives every decoding sequence its token."""
    config = tiny_config(max_batch_tokens=16, num_kv_blocks=2048)
    engine = ReferenceEngine(config)
    params = SamplingParams(max_tokens=1000)
    rng = np.random.default_rng(9)
    for name in "abcd":
        engine.prefill(name, rng.integers(0, 256, 10).tolist(), params)
    engine.start_prefill("long", rng.integers(0, 256, 300).tolist(), params)
    decoding = dict.fromkeys("abcd", params)
    steps = 0
    while True:
        outputs = engine.step(decoding)
        steps += 1
        assert [o.request_id for o in outputs[:4]] == list("abcd")
        if len(outputs) == 5:
            assert outputs[4].request_id == "long" and outputs[4].prefill is not None
            assert outputs[4].prefill.num_prompt_tokens == 300
            break
    planned, computed = 0, 0
    while computed < 300:
        (chunk,) = plan_prefill_chunks(16, 4, [(computed, 300)], compute_attention_tokens(config))
        assert 4 <= chunk <= 12
        computed += chunk
        planned += 1
    assert steps == planned
    assert engine.stats().prompt_tokens_computed == 4 * 10 + 300


def test_queued_prefills_cannot_oversubscribe_the_pool(tiny_config: TinyConfigFactory) -> None:
    """A queued prefill holds a reservation for its peak: a second one that would not fit
    beside it is refused up front, not half-way through its chunks."""
    peak = compute_prefill_peak_blocks(tiny_config(prefill_chunk=8), 200)
    engine = ReferenceEngine(tiny_config(prefill_chunk=8, num_kv_blocks=peak + peak // 2))
    rng = np.random.default_rng(1)
    engine.start_prefill("first", rng.integers(0, 256, 200).tolist(), SamplingParams(max_tokens=2))
    with pytest.raises(KvCapacityError, match="needs"):
        engine.start_prefill(
            "second", rng.integers(0, 256, 200).tolist(), SamplingParams(max_tokens=2)
        )
    while not any(o.prefill for o in engine.step({})):
        pass
    engine.release("first")
    engine.start_prefill("second", rng.integers(0, 256, 200).tolist(), SamplingParams(max_tokens=2))


def test_a_higher_priority_prefill_takes_its_steps_alone(tiny_config: TinyConfigFactory) -> None:
    """Idle budget 40: the later, ranked-up 30-token prompt is prefilled first and alone
    (the 10 tokens it leaves are not handed down); the earlier one follows."""
    engine = ReferenceEngine(tiny_config(prefill_chunk=40, max_batch_tokens=40))
    rng = np.random.default_rng(3)
    engine.start_prefill("low", rng.integers(0, 256, 60).tolist(), SamplingParams(max_tokens=2))
    high = SamplingParams(max_tokens=2, priority=1)
    engine.start_prefill("high", rng.integers(0, 256, 30).tolist(), high)
    assert [o.request_id for o in engine.step({})] == ["high"]
    assert engine.stats().prompt_tokens_computed == 30
    assert engine.step({}) == []  # low's first 40 tokens
    assert [o.request_id for o in engine.step({})] == ["low"]
    assert engine.stats().prompt_tokens_computed == 90


def test_a_ranked_up_decode_row_pauses_then_slows_lower_prefill_without_stopping_it(
    tiny_config: TinyConfigFactory,
) -> None:
    """While a ranked-up row writes its first tokens (``FIRST_TOKENS``) the prompt waits;
    after, the step that decodes the row gives the prompt a quarter of its prefill
    budget: some tokens, well under what the same step computes when nothing outranks
    the prompt (not exactly a quarter: a token's cost includes its attention)."""

    def tokens_beside_a_decode_row(priority: int) -> list[int]:
        engine = ReferenceEngine(tiny_config(prefill_chunk=128, max_batch_tokens=129))
        rng = np.random.default_rng(4)
        decoding = SamplingParams(max_tokens=FIRST_TOKENS + 2, priority=priority)
        engine.start_prefill("decoding", rng.integers(0, 256, 10).tolist(), decoding)
        while not any(o.prefill for o in engine.step({})):
            pass
        engine.start_prefill("low", rng.integers(0, 256, 2000).tolist(), GREEDY)
        computed = []
        for _ in range(FIRST_TOKENS):  # the row's tokens 2 to FIRST_TOKENS, then one more
            before = engine.stats().prompt_tokens_computed
            engine.step({"decoding": decoding})
            computed.append(engine.stats().prompt_tokens_computed - before)
        return computed

    level, outranked = tokens_beside_a_decode_row(0), tokens_beside_a_decode_row(1)
    assert outranked[:-1] == [0] * (FIRST_TOKENS - 1)
    # Both from the prompt's start (a later chunk costs more attention per token).
    assert 0 < outranked[-1] < level[0] // 2


def _kv_bytes(engine: ReferenceEngine, layout: KvLayout) -> bytes:
    region = engine.kv_regions()[0]
    return b"".join(bytes(region[r.offset : r.offset + r.length]) for r in layout.ranges)


@pytest.mark.parametrize("experts", [0, 4])
def test_chunking_and_cached_prefixes_change_no_kv_bit(
    tiny_config: TinyConfigFactory, experts: int
) -> None:
    """The KV a prompt leaves (what a decode worker receives) is the same bytes however
    the prefill was chunked and whether its prefix came from the cache."""
    rng = np.random.default_rng(5)
    prompt = rng.integers(0, 256, 133).tolist()
    reference = ReferenceEngine(tiny_config(num_experts=experts, prefill_chunk=64))
    expected = _kv_bytes(reference, reference.prefill("r", prompt, GREEDY).kv)
    for budget in (1, 3, 8, 41):
        engine = ReferenceEngine(tiny_config(num_experts=experts, prefill_chunk=budget))
        assert _kv_bytes(engine, engine.prefill("r", prompt, GREEDY).kv) == expected
    warm = ReferenceEngine(tiny_config(num_experts=experts))
    warm.prefill("other", [*prompt[:100], 1, 2, 3], GREEDY)  # 12 shared blocks of 8
    result = warm.prefill("r", prompt, GREEDY)
    assert warm.stats().prompt_tokens_cached == 96
    assert _kv_bytes(warm, result.kv) == expected
