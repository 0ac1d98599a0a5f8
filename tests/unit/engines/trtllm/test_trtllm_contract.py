"""Contract tests: the trtllm engine against a fake TensorRT-LLM mirroring 1.2.1.

Drives the adapter through prefill -> opaque handle -> decode on two LLM instances,
cancellation and engine errors. The fake validates the rendered LLM API options with
1.2.1's field names, so the renderer and the adapter are checked together.
"""

from __future__ import annotations

import asyncio
import json
import pickle
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tandem.api.v1alpha1 import InferenceCluster
from tandem.api.validate import load_inference_cluster
from tandem.engines.base import (
    AsyncEngine,
    EngineError,
    FinishReason,
    PrefillResult,
    SamplingParams,
    StepOutput,
)
from tandem.engines.registry import make_engine
from tandem.engines.trtllm import (
    PINNED_VERSION,
    RequestAborted,
    TrtllmEngine,
    TrtllmEngineOptions,
    render_trtllm_config,
)
from tandem.engines.trtllm.api import load_trtllm

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = ROOT / "manifests" / "examples" / "gpt-oss-120b-gb200.yaml"
PROMPT = list(range(5, 70))
EngineFactory = Callable[..., TrtllmEngine]


def test_fake_mirrors_the_pinned_version(fake_trtllm: ModuleType) -> None:
    assert PINNED_VERSION == "1.2.1"
    assert fake_trtllm.__version__ == PINNED_VERSION
    assert load_trtllm().version == PINNED_VERSION


@pytest.fixture
def make(fake_trtllm: ModuleType) -> EngineFactory:
    cluster = load_inference_cluster(EXAMPLE)

    def build(role: str, **overrides: Any) -> TrtllmEngine:
        llm_args = {**render_trtllm_config(cluster, role), **overrides}
        options = {"model": "/models/gpt-oss-120b", "role": role, "llm_args": llm_args}
        return TrtllmEngine(TrtllmEngineOptions.from_options(options))

    return build


@pytest.fixture
async def pair(make: EngineFactory) -> AsyncIterator[tuple[TrtllmEngine, TrtllmEngine]]:
    prefill, decode = make("prefill"), make("decode")
    await prefill.start()
    await decode.start()
    yield prefill, decode
    await prefill.close()
    await decode.close()


async def collect(stream: AsyncIterator[StepOutput]) -> list[StepOutput]:
    return [step async for step in stream]


def llm_of(engine: TrtllmEngine) -> Any:
    return engine._llm  # the fake LLM, for its test hooks


async def test_satisfies_the_async_engine_protocol(pair: tuple[TrtllmEngine, ...]) -> None:
    engine: AsyncEngine = pair[0]
    assert engine.info.extra["trtllm_version"] == PINNED_VERSION
    assert engine.info.kv_block_size == 32


async def test_disaggregated_stream_equals_the_aggregated_one(
    pair: tuple[TrtllmEngine, TrtllmEngine],
) -> None:
    prefill, decode = pair
    sampling = SamplingParams(max_tokens=12)
    result = await prefill.prefill("r1", PROMPT, sampling)
    assert result.kv.ranges == () and result.num_prompt_tokens == len(PROMPT)
    assert result.finish_reason is None
    steps = await collect(decode.generate("r1", PROMPT, sampling, handoff=result))
    local = await collect(decode.generate("r2", PROMPT, sampling))
    assert [result.first_token] + [s.token for s in steps] == [s.token for s in local]
    assert len(steps) == sampling.max_tokens - 1
    assert steps[-1].finish_reason is FinishReason.LENGTH
    assert all(s.finish_reason is None for s in steps[:-1])
    assert {s.request_id for s in steps} == {"r1"}


async def test_handle_is_json_with_base64_never_pickle(
    pair: tuple[TrtllmEngine, TrtllmEngine],
) -> None:
    prefill, decode = pair
    result = await prefill.prefill("r1", PROMPT, SamplingParams(max_tokens=4))
    document = json.loads(result.opaque)
    assert isinstance(document["params"]["opaque_state"], str)
    assert document["trtllm"] == PINNED_VERSION
    forged = PrefillResult(result.first_token, len(PROMPT), result.kv, pickle.dumps(document))
    with pytest.raises(EngineError, match="not JSON"):
        await collect(decode.generate("r1", PROMPT, SamplingParams(max_tokens=4), forged))


async def test_handle_from_another_release_is_refused(
    pair: tuple[TrtllmEngine, TrtllmEngine],
) -> None:
    prefill, decode = pair
    result = await prefill.prefill("r1", PROMPT, SamplingParams(max_tokens=4))
    document = json.loads(result.opaque)
    document["trtllm"] = "1.3.0rc9"
    other = PrefillResult(result.first_token, len(PROMPT), result.kv, json.dumps(document).encode())
    with pytest.raises(EngineError, match=r"1\.3\.0rc9 .* both pools must run the same release"):
        await collect(decode.generate("r1", PROMPT, SamplingParams(max_tokens=4), other))


async def test_stop_token_in_decode_ends_with_stop(pair: tuple[TrtllmEngine, TrtllmEngine]) -> None:
    prefill, decode = pair
    local = await collect(decode.generate("probe", PROMPT, SamplingParams(max_tokens=6)))
    stop = local[3].token
    sampling = SamplingParams(max_tokens=20, stop_token_ids=(stop,))
    result = await prefill.prefill("r1", PROMPT, sampling)
    steps = await collect(decode.generate("r1", PROMPT, sampling, handoff=result))
    assert steps[-1] == StepOutput("r1", stop, FinishReason.STOP)
    assert len(steps) == 3


async def test_first_token_can_finish_the_request(pair: tuple[TrtllmEngine, TrtllmEngine]) -> None:
    prefill, decode = pair
    probe = await prefill.prefill("probe", PROMPT, SamplingParams(max_tokens=4))
    sampling = SamplingParams(max_tokens=4, stop_token_ids=(probe.first_token,))
    result = await prefill.prefill("r1", PROMPT, sampling)
    assert result.finish_reason is FinishReason.STOP
    assert await collect(decode.generate("r1", PROMPT, sampling, handoff=result)) == []
    one = await prefill.prefill("r2", PROMPT, SamplingParams(max_tokens=1))
    assert one.finish_reason is FinishReason.LENGTH


async def test_cancel_ends_a_running_stream(pair: tuple[TrtllmEngine, TrtllmEngine]) -> None:
    prefill, decode = pair
    sampling = SamplingParams(max_tokens=500)
    result = await prefill.prefill("r1", PROMPT, sampling)
    seen: list[StepOutput] = []
    async for step in decode.generate("r1", PROMPT, sampling, handoff=result):
        seen.append(step)
        if len(seen) == 3:
            await decode.cancel("r1")
    assert 3 <= len(seen) < sampling.max_tokens - 1
    assert all(s.finish_reason in (None, FinishReason.CANCELLED) for s in seen)
    await decode.cancel("r1")  # idempotent once finished
    await decode.cancel("never-seen")


async def test_closing_the_stream_early_aborts_the_request(
    pair: tuple[TrtllmEngine, TrtllmEngine],
) -> None:
    _, decode = pair
    stream = decode.generate("r1", PROMPT, SamplingParams(max_tokens=500))
    assert isinstance(stream, AsyncIterator)
    await anext(stream)
    output = decode._running["r1"]
    await stream.aclose()  # type: ignore[attr-defined]
    assert output.aborted  # type: ignore[attr-defined]
    assert "r1" not in decode._running


async def test_cancelling_a_prefill_aborts_it(pair: tuple[TrtllmEngine, TrtllmEngine]) -> None:
    prefill, _ = pair
    task = asyncio.create_task(prefill.prefill("r1", PROMPT, SamplingParams(max_tokens=4)))
    await asyncio.sleep(0)
    output = prefill._running["r1"]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert output.aborted  # type: ignore[attr-defined]


async def test_prefill_aborted_through_cancel_raises_request_aborted(
    pair: tuple[TrtllmEngine, TrtllmEngine],
) -> None:
    prefill, _ = pair
    task = asyncio.create_task(prefill.prefill("r1", PROMPT, SamplingParams(max_tokens=4)))
    await asyncio.sleep(0)
    await prefill.cancel("r1")  # lands while the request is still queued
    with pytest.raises(RequestAborted, match="cancelled"):
        await task


async def test_engine_errors_surface_as_engine_errors(
    pair: tuple[TrtllmEngine, TrtllmEngine],
) -> None:
    prefill, decode = pair
    llm_of(prefill).fail_next.append("CUDA error: an illegal memory access was encountered")
    with pytest.raises(EngineError, match="failed the prefill: CUDA error"):
        await prefill.prefill("r1", PROMPT, SamplingParams(max_tokens=4))
    assert "r1" not in prefill._running
    llm_of(decode).fail_next.append("out of KV blocks")
    with pytest.raises(EngineError, match="failed the request: out of KV blocks"):
        await collect(decode.generate("r2", PROMPT, SamplingParams(max_tokens=4)))


async def test_missing_kv_on_the_prefill_side_fails_the_decode(
    pair: tuple[TrtllmEngine, TrtllmEngine],
) -> None:
    prefill, decode = pair
    sampling = SamplingParams(max_tokens=4)
    result = await prefill.prefill("r1", PROMPT, sampling)
    await collect(decode.generate("r1", PROMPT, sampling, handoff=result))
    with pytest.raises(EngineError, match="no KV parked"):  # pulled once already
        await collect(decode.generate("again", PROMPT, sampling, handoff=result))


async def test_prompt_longer_than_the_transfer_buffer_fails_loudly(make: EngineFactory) -> None:
    transceiver = {"backend": "NIXL", "max_tokens_in_buffer": 32}
    prefill = make("prefill", cache_transceiver_config=transceiver)
    await prefill.start()
    with pytest.raises(EngineError, match="does not fit max_tokens_in_buffer=32"):
        await prefill.prefill("r1", PROMPT, SamplingParams(max_tokens=4))
    await prefill.close()


async def test_overlap_scheduler_on_a_context_worker_fails_loudly(make: EngineFactory) -> None:
    prefill = make("prefill", disable_overlap_scheduler=False)
    await prefill.start()
    with pytest.raises(EngineError, match="disable_overlap_scheduler"):
        await prefill.prefill("r1", PROMPT, SamplingParams(max_tokens=4))
    await prefill.close()


async def test_mismatched_transceiver_backends_fail_the_decode(make: EngineFactory) -> None:
    prefill = make("prefill")
    decode = make("decode", cache_transceiver_config={"backend": "UCX"})
    await prefill.start()
    await decode.start()
    result = await prefill.prefill("r1", PROMPT, SamplingParams(max_tokens=4))
    with pytest.raises(EngineError, match="backends differ: NIXL vs UCX"):
        await collect(decode.generate("r1", PROMPT, SamplingParams(max_tokens=4), result))
    await prefill.close()
    await decode.close()


async def test_roles_are_enforced(pair: tuple[TrtllmEngine, TrtllmEngine]) -> None:
    prefill, decode = pair
    with pytest.raises(EngineError, match="run on prefill workers"):
        await decode.prefill("r1", PROMPT, SamplingParams(max_tokens=4))
    with pytest.raises(EngineError, match="only run context-only"):
        await collect(prefill.generate("r1", PROMPT, SamplingParams(max_tokens=4)))


async def test_stats_map_queue_depth_sequences_and_kv(
    pair: tuple[TrtllmEngine, TrtllmEngine],
) -> None:
    prefill, decode = pair
    sampling = SamplingParams(max_tokens=300)
    result = await prefill.prefill("r1", PROMPT, sampling)
    parked = await prefill.stats()
    assert parked.kv_blocks_total == 65_536 // 32
    assert parked.kv_blocks_free == parked.kv_blocks_total - 3  # 65 tokens -> 3 blocks
    stream = decode.generate("r1", PROMPT, sampling, handoff=result)
    for _ in range(5):
        await anext(stream)
    running = await decode.stats()
    assert running.active_sequences == 1
    assert 0 < running.kv_utilization < 0.01
    assert running.queued_requests == 0
    await stream.aclose()  # type: ignore[attr-defined]


async def test_eagle3_options_reach_the_llm_as_a_config_object(fake_trtllm: ModuleType) -> None:
    manifest = yaml.safe_load(EXAMPLE.read_text())
    eagle3 = {"model": "/models/gpt-oss-120b-eagle3", "max_draft_len": 3}
    manifest["spec"]["decode"]["engineOptions"] = {"eagle3": eagle3}
    cluster = InferenceCluster.model_validate(manifest)
    llm_args = render_trtllm_config(cluster, "decode")
    options = {"model": "/models/gpt-oss-120b", "role": "decode", "llm_args": llm_args}
    engine = TrtllmEngine(TrtllmEngineOptions.from_options(options))
    await engine.start()
    speculative = llm_of(engine).args.speculative_config
    # TensorRT-LLM's PyTorch backend runs decoding_type "Eagle" as Eagle-3.
    assert isinstance(speculative, fake_trtllm.llmapi.EagleDecodingConfig)
    assert (speculative.max_draft_len, speculative.eagle3_one_model) == (3, True)
    assert speculative.speculative_model == "/models/gpt-oss-120b-eagle3"
    await engine.close()


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ({"kv_cache_config": {"tokens_per_blok": 32}}, "tokens_per_blok"),
        ({"enable_chunked_prefil": True}, "invalid argument: enable_chunked_prefil"),
        ({"cache_transceiver_config": {"backend": "TCP"}}, "backend"),
    ],
)
async def test_invalid_llm_options_fail_start_with_an_engine_error(
    make: EngineFactory, override: dict[str, Any], says: str
) -> None:
    engine = make("decode", **override)
    with pytest.raises(EngineError, match="refused its options") as refused:
        await engine.start()
    assert says in str(refused.value)


@pytest.mark.parametrize(
    "example", ["gpt-oss-20b-h100.yaml", "gpt-oss-120b-b200.yaml", "gpt-oss-120b-gb200.yaml"]
)
@pytest.mark.parametrize("role", ["prefill", "decode"])
async def test_every_rendered_option_is_one_tensorrt_llm_accepts(
    fake_trtllm: ModuleType, example: str, role: str
) -> None:
    """The fake's models are written from TensorRT-LLM's source, not from the renderer's
    catalogue: a misspelt or misplaced option name fails here."""
    cluster = load_inference_cluster(EXAMPLE.parent / example)
    options = {
        "model": "/models/m",
        "model_name": cluster.spec.model.name,
        "role": role,
        "llm_args": render_trtllm_config(cluster, role),
    }
    engine = TrtllmEngine(TrtllmEngineOptions.from_options(options))
    await engine.start()
    await engine.close()


async def test_not_started_engine_says_so(make: EngineFactory) -> None:
    with pytest.raises(EngineError, match="not started"):
        await make("prefill").prefill("r1", PROMPT, SamplingParams(max_tokens=2))


async def test_without_tensorrt_llm_start_names_the_image() -> None:
    engine = make_engine(
        "trtllm", {"model": "/models/gpt-oss-20b", "role": "decode"}
    )  # registry -> tandem.engines.trtllm.create_engine
    assert isinstance(engine, TrtllmEngine)
    with pytest.raises(
        EngineError, match=r"TensorRT-LLM 1\.2\.1, which is not installed.*release:1\.2\.1"
    ):
        await engine.start()
