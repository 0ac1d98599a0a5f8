"""Serving with real tokenizers: gpt-oss's reasoning and answer channels in both response
shapes, and tokenizer work kept off the event loop's thread."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tandem.frontend.metrics import FrontendMetrics
from tandem.frontend.preparation import RequestContext, ServingConfig
from tandem.frontend.protocol import ChatCompletionRequest, ChatCompletionResponse
from tandem.frontend.serving import OFFLOAD_DETOKENIZE_TOKENS, OpenAIServing
from tandem.router.messages import GenerationChunk, GenerationRequest
from tandem.tokenization import ByteTokenizer, ChatMessage, Tokenizer
from tandem.tokenization.harmony import HarmonyTokenizer, load_harmony_tokenizer
from tandem.tokenization.protocol import ChatDelta, ChatOutputParser

REPLY = (
    "<|channel|>analysis<|message|>The user wants the capital. It is Paris.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Paris is the capital of France.<|return|>"
)


class Scripted:
    """Answers every request with ``ids``, ``per_chunk`` at a time."""

    def __init__(self, ids: Sequence[int], per_chunk: int = 3) -> None:
        self.ids, self.per_chunk = list(ids), per_chunk
        self.requests: list[GenerationRequest] = []

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        self.requests.append(request)
        for start in range(0, len(self.ids), self.per_chunk):
            part = tuple(self.ids[start : start + self.per_chunk])
            last = start + self.per_chunk >= len(self.ids)
            yield GenerationChunk(part, "stop" if last else None)


def serving(tokenizer: Tokenizer, generator: Scripted, **kwargs: Any) -> OpenAIServing:
    config = ServingConfig(
        "m", max_input_tokens=4096, max_output_tokens=512, max_context_tokens=8192
    )
    return OpenAIServing(
        config, tokenizer, generator, FrontendMetrics(CollectorRegistry()), **kwargs
    )


def chat(stream: bool, **extra: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "Capital of France?"}],
         "stream": stream, **extra}
    )  # fmt: skip


@pytest.fixture(scope="module")
def harmony() -> HarmonyTokenizer:
    return load_harmony_tokenizer()


def harmony_ids(tok: HarmonyTokenizer, text: str) -> list[int]:
    ids: list[int] = []
    for piece in re.split(r"(<\|[a-z_]+\|>)", text):
        if piece in tok.special_tokens:
            ids.append(tok.special_tokens[piece])
        elif piece:
            ids += tok.encode(piece)
    return ids


async def test_harmony_channels_become_reasoning_and_content(harmony: HarmonyTokenizer) -> None:
    generator = Scripted(harmony_ids(harmony, REPLY))
    service = serving(harmony, generator)
    response = await service.create_chat_completion(chat(False), RequestContext("r1", 0.0))
    assert isinstance(response, ChatCompletionResponse)
    message = response.model_dump()["choices"][0]["message"]
    assert message == {
        "role": "assistant",
        "content": "Paris is the capital of France.",
        "reasoning_content": "The user wants the capital. It is Paris.",
    }
    # The prompt is harmony's, and generation stops at <|return|> / <|call|> only.
    sent = generator.requests[0]
    expected = harmony.apply_chat_template([ChatMessage("user", "Capital of France?")])
    assert list(sent.prompt) == expected
    assert set(sent.sampling.stop_token_ids) == {200002, 200012}


async def test_streamed_chunks_carry_the_same_split(harmony: HarmonyTokenizer) -> None:
    service = serving(harmony, Scripted(harmony_ids(harmony, REPLY), per_chunk=2))
    stream = await service.create_chat_completion(
        chat(True, stop=["France"]), RequestContext("r2", 0.0)
    )
    assert not isinstance(stream, ChatCompletionResponse)
    reasoning, content = "", ""
    async for event in stream:
        for block in event.split("\n\n"):
            if not block.startswith("data: {"):
                continue
            choices = json.loads(block.removeprefix("data: "))["choices"]
            chunk = choices[0]["delta"] if choices else {}
            reasoning += chunk.get("reasoning_content", "")
            content += chunk.get("content", "")
    assert reasoning == "The user wants the capital. It is Paris."
    assert content == "Paris is the capital of "  # the stop string cuts the answer only


class ThreadRecorder:
    """A tokenizer that notes which threads did its work."""

    def __init__(self, inner: Tokenizer) -> None:
        self.inner = inner
        self.threads: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def apply_chat_template(self, messages: Sequence[ChatMessage], **kw: Any) -> list[int]:
        self.threads.add(threading.current_thread().name)
        return self.inner.apply_chat_template(messages, **kw)

    def chat_output(self) -> ChatOutputParser:
        recorder, inner = self, self.inner.chat_output()

        class Parser:
            def push_many(self, ids: Sequence[int]) -> ChatDelta:
                if len(ids) >= OFFLOAD_DETOKENIZE_TOKENS:
                    recorder.threads.add(threading.current_thread().name)
                return inner.push_many(ids)

            def finish(self) -> ChatDelta:
                return inner.finish()

        return Parser()


async def test_encoding_and_large_detokenization_run_off_the_event_loop() -> None:
    tokenizer = ThreadRecorder(ByteTokenizer())
    long_answer = ByteTokenizer().encode("x" * (3 * OFFLOAD_DETOKENIZE_TOKENS))
    executor = ThreadPoolExecutor(2, thread_name_prefix="tokenizer")
    service = serving(
        tokenizer,
        Scripted(long_answer, per_chunk=2 * OFFLOAD_DETOKENIZE_TOKENS),
        executor=executor,
    )
    try:
        response = await service.create_chat_completion(chat(False), RequestContext("r3", 0.0))
    finally:
        executor.shutdown()
    assert isinstance(response, ChatCompletionResponse)
    assert response.choices[0].message.content == "x" * (3 * OFFLOAD_DETOKENIZE_TOKENS)
    loop_thread = threading.current_thread().name
    assert tokenizer.threads and loop_thread not in tokenizer.threads
    assert all(name.startswith("tokenizer") for name in tokenizer.threads)
