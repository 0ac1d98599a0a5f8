"""The official openai client against `tandem up` serving the CPU example as it is:
SmolLM2-135M-Instruct in the reference engine, real processes, KV over NIXL.

Two clusters for the whole module: ``disagg`` (a prefill worker, the KV moved to a decode
worker) and ``local`` (no prefill worker: the decode worker prefills). Greedy answers to
factual questions are right on both and identical token for token; so is seeded sampling;
the router's metrics say which path every request took."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

pytestmark = [
    pytest.mark.integration,
    pytest.mark.parallel,
]

EXAMPLE = Path(__file__).parents[2] / "manifests" / "examples" / "reference-cpu.yaml"
PROMPTS = [
    "Tell me about tandem bicycles and why two riders go faster.",
    "x" * 40,
    "The quick brown fox jumps over the lazy dog. " * 4,
    "Explain prefill and decode. " * 8,
]
# Questions SmolLM2-135M-Instruct answers right when greedy, and a word the answer holds.
FACTS = [
    ("What is the capital of France?", "Paris"),
    ("What is the capital of Japan?", "Tokyo"),
    ("What is the chemical symbol for gold?", "Au"),
]
# SmolLM2's chat template opens every prompt with the same system prompt, whose first KV
# block the decode worker soon caches; a one-line question is then ~20 uncached tokens,
# and it should still be worth a remote prefill here (a repeated one no longer is).
MIN_PREFILL_TOKENS = 16


def cluster(name: str, prefill_replicas: int) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["model"].update({"maxInputTokens": 1024, "maxOutputTokens": 64})
    doc["spec"]["prefill"].update({"replicas": prefill_replicas})
    doc["spec"]["frontend"]["disaggregation"] = {"minPrefillTokens": MIN_PREFILL_TOKENS}
    return doc


@pytest.fixture(scope="module")
def clusters(module_clusters: Any) -> dict[str, str]:
    return dict(module_clusters.up_all([cluster("disagg", 1), cluster("local", 0)]))


def decisions(endpoint: str) -> dict[str, float]:
    text = httpx.get(endpoint.removesuffix("/v1") + "/metrics").text
    found = re.findall(
        r'^tandem_router_prefill_decisions_total\{path="(\w+)",reason="(\w+)"\} (\S+)$',
        text,
        flags=re.MULTILINE,
    )
    return {f"{path}/{reason}": float(value) for path, reason, value in found}


def kv_bytes_moved(endpoint: str) -> float:
    text = httpx.get(endpoint.removesuffix("/v1") + "/metrics").text
    found = re.search(r"^tandem_router_kv_transfer_bytes_total (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def generate(endpoint: str, prompt: str, **sampling: Any) -> dict[str, Any]:
    body = {"model": "reference", "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 24, "return_token_ids": True, **sampling}  # fmt: skip
    response = httpx.post(f"{endpoint}/chat/completions", json=body, timeout=600)
    assert response.status_code == 200, response.text
    return dict(response.json())


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.8, "seed": 7}])
def test_disaggregated_equals_local_token_for_token(
    clusters: dict[str, str], sampling: dict[str, Any]
) -> None:
    before = {name: decisions(endpoint) for name, endpoint in clusters.items()}
    # Prompts these clusters have not seen: a decode worker that already caches a prompt
    # (from an earlier case) rightly prefills it itself ("local/cached_prefix").
    for prompt in (f"[{sampling}] {p}" for p in PROMPTS):
        remote = generate(clusters["disagg"], prompt, **sampling)
        local = generate(clusters["local"], prompt, **sampling)
        assert remote["choices"][0]["token_ids"] == local["choices"][0]["token_ids"]
        assert remote["choices"][0]["message"] == local["choices"][0]["message"]
        assert remote["usage"] == local["usage"]
    after = {name: decisions(endpoint) for name, endpoint in clusters.items()}
    delta = {
        name: {k: v - before[name].get(k, 0.0) for k, v in after[name].items()} for name in after
    }
    assert delta["disagg"].get("remote/long_prompt") == len(PROMPTS)
    assert delta["local"].get("local/no_prefill_workers") == len(PROMPTS)
    assert kv_bytes_moved(clusters["disagg"]) > 0


def test_greedy_answers_to_factual_questions_are_right_both_ways(
    clusters: dict[str, str],
) -> None:
    before = {name: decisions(endpoint) for name, endpoint in clusters.items()}
    moved_before = kv_bytes_moved(clusters["disagg"])
    answers: dict[str, list[tuple[str, list[int]]]] = {}
    for name, endpoint in clusters.items():
        client = openai.OpenAI(base_url=endpoint, api_key="unused", max_retries=0, timeout=300)
        for question, _ in FACTS:
            reply = client.chat.completions.create(
                model="reference",
                messages=[{"role": "user", "content": question}],
                max_tokens=24,
                temperature=0,
                extra_body={"return_token_ids": True},
            )
            choice = reply.choices[0]
            token_ids = (choice.model_extra or {}).get("token_ids")
            assert isinstance(token_ids, list) and token_ids, choice
            answers.setdefault(name, []).append((choice.message.content or "", token_ids))
    for (question, word), remote, local in zip(
        FACTS, answers["disagg"], answers["local"], strict=True
    ):
        assert word in remote[0], f"{question!r} -> {remote[0]!r}"
        assert remote == local, f"{question!r}: disaggregated {remote} vs local {local}"
    delta = {
        name: {k: v - before[name].get(k, 0.0) for k, v in decisions(endpoint).items()}
        for name, endpoint in clusters.items()
    }
    # Every disaggregated answer came from KV a prefill worker computed and NIXL moved.
    assert delta["disagg"].get("remote/long_prompt") == len(FACTS), delta["disagg"]
    assert delta["local"].get("local/no_prefill_workers") == len(FACTS), delta["local"]
    assert kv_bytes_moved(clusters["disagg"]) > moved_before


def test_openai_client_chat_and_completions(clusters: dict[str, str]) -> None:
    client = openai.OpenAI(base_url=clusters["disagg"], api_key="unused", max_retries=0)
    messages: Any = [{"role": "user", "content": PROMPTS[0]}]
    chat = client.chat.completions.create(
        model="reference", messages=messages, max_tokens=16, temperature=0
    )
    assert chat.choices[0].finish_reason in ("length", "stop")
    assert chat.usage is not None and chat.usage.completion_tokens >= 1
    stream = client.chat.completions.create(
        model="reference", messages=messages, max_tokens=16, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == chat.choices[0].message.content
    assert chunks[-1].usage is not None and chunks[-1].usage == chat.usage

    legacy = client.completions.create(model="reference", prompt=PROMPTS[2], max_tokens=8,
                                       temperature=0)  # fmt: skip
    streamed = client.completions.create(model="reference", prompt=PROMPTS[2], max_tokens=8,
                                         temperature=0, stream=True)  # fmt: skip
    assert "".join(c.choices[0].text for c in streamed) == legacy.choices[0].text
    assert [m.id for m in client.models.list().data] == ["reference"]


def test_a_prompt_the_decode_worker_caches_is_prefilled_there(clusters: dict[str, str]) -> None:
    """The decode worker caches the KV it received; its KV events tell the router, which
    then prefills the same prompt on it instead of moving the KV again."""
    prompt = "Why does a second rider make a tandem faster?"
    before = decisions(clusters["disagg"])
    first = generate(clusters["disagg"], prompt, temperature=0)
    second = generate(clusters["disagg"], prompt, temperature=0)
    after = decisions(clusters["disagg"])
    delta = {k: v - before.get(k, 0.0) for k, v in after.items()}
    assert delta.get("remote/long_prompt") == 1
    assert delta.get("local/cached_prefix") == 1
    assert first["choices"][0]["token_ids"] == second["choices"][0]["token_ids"]
