"""gpt-oss's request path end to end on CPU: the random gpt-oss-shaped reference model
with the real o200k vocabulary (201,088 ids), harmony prompts rendered by openai-harmony
in the frontend, harmony stop tokens, answers parsed back into reasoning and content --
through real processes and the official openai client, disaggregated equal to local."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from tandem.tokenization import ChatMessage
from tandem.tokenization.harmony import HarmonyTokenizer, load_harmony_tokenizer

pytestmark = [pytest.mark.integration, pytest.mark.parallel]

EXAMPLE = Path(__file__).parents[2] / "manifests" / "examples" / "reference-gpt-oss-cpu.yaml"
MODEL = "gpt-oss-tiny"
PROMPTS = [
    "What is the capital of France?",
    "Explain disaggregated prefill and decode in two sentences. " * 12,  # > one window
]


def cluster(name: str, prefill_replicas: int) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["model"].update({"maxInputTokens": 2048, "maxOutputTokens": 32})
    doc["spec"]["prefill"]["replicas"] = prefill_replicas
    return doc


@pytest.fixture(scope="module")
def clusters(module_clusters: Any) -> dict[str, str]:
    return dict(module_clusters.up_all([cluster("oss-disagg", 1), cluster("oss-local", 0)]))


@pytest.fixture(scope="module")
def harmony() -> HarmonyTokenizer:
    return load_harmony_tokenizer()


def chat(endpoint: str, prompt: str, **extra: Any) -> dict[str, Any]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 24, "temperature": 0, "return_token_ids": True, **extra}  # fmt: skip
    response = httpx.post(f"{endpoint}/chat/completions", json=body, timeout=600)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_harmony_in_and_out_disaggregated_equals_local(
    clusters: dict[str, str], harmony: HarmonyTokenizer
) -> None:
    for prompt in PROMPTS:
        remote = chat(clusters["oss-disagg"], prompt)
        local = chat(clusters["oss-local"], prompt)
        assert remote["choices"][0] == local["choices"][0]
        assert remote["usage"] == local["usage"]
        # The prompt the workers ran is openai-harmony's rendering of the conversation.
        expected_prompt = harmony.apply_chat_template([ChatMessage("user", prompt)])
        assert remote["usage"]["prompt_tokens"] == len(expected_prompt)
        # The answer is what harmony's parser makes of the generated ids, and the ids
        # are o200k ids (the random model uses the whole 201,088-row vocabulary).
        ids = remote["choices"][0]["token_ids"]
        assert ids and all(0 <= t < 201_088 for t in ids)
        parser = harmony.chat_output()
        reply = parser.push_many(ids) + parser.finish()
        message = remote["choices"][0]["message"]
        assert message["content"] == reply.content
        assert message.get("reasoning_content") == (reply.reasoning or None)
        # Generation ends at a harmony stop token or at max_tokens, nowhere else.
        if remote["choices"][0]["finish_reason"] == "stop":
            assert ids[-1] in harmony.stop_token_ids
        else:
            assert len(ids) == 24


def test_openai_client_streams_what_it_gets_whole(clusters: dict[str, str]) -> None:
    client = openai.OpenAI(base_url=clusters["oss-disagg"], api_key="unused", max_retries=0)
    messages: Any = [{"role": "user", "content": PROMPTS[1]}]
    whole = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=16, temperature=0
    )
    stream = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=16, temperature=0, stream=True
    )
    content, reasoning = "", ""
    for chunk in stream:
        if chunk.choices:
            delta = chunk.choices[0].delta
            content += delta.content or ""
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
    assert content == (whole.choices[0].message.content or "")
    extra = whole.choices[0].message.model_extra or {}
    assert reasoning == (extra.get("reasoning_content") or "")
    assert [m.id for m in client.models.list().data] == [MODEL]
