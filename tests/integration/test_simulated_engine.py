"""The simulated engine through real processes: the frontend renders a harmony prompt of
real o200k ids, the router disaggregates it, the prefill worker's simulated engine
writes the sequence's state into its KV slot, the decode worker pulls that payload over
NIXL (claim, read, release) and continues the hash chain -- so a disaggregated answer
equals the local one token for token only if the handoff really delivered the bytes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from tandem.engines.simulated.config import HARMONY_FINAL_HEADER, O200K_ORDINARY

pytestmark = [pytest.mark.integration]

EXAMPLE = Path(__file__).parents[2] / "manifests" / "examples" / "simulated-gpt-oss-120b-gb200.yaml"
MODEL = "gpt-oss-120b"
# Long enough to go to the prefill pool (minPrefillTokens below), and to span several
# simulated prefill chunks of 512 tokens.
LONG_PROMPT = "Disaggregated serving splits prefill from decode. " * 300
SHORT_PROMPT = "What is the capital of France?"


def cluster(name: str, prefill_replicas: int) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["name"] = name
    spec = doc["spec"]
    spec["engine"]["options"].update({"speedup": 100, "max_num_tokens": 512})
    spec["frontend"] = {"port": 8000, "disaggregation": {"minPrefillTokens": 64}}
    spec["prefill"]["replicas"] = prefill_replicas
    return doc


@pytest.fixture(scope="module")
def clusters(module_clusters: Any) -> dict[str, str]:
    return dict(module_clusters.up_all([cluster("sim-disagg", 1), cluster("sim-local", 0)]))


def client(endpoint: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=endpoint, api_key="unused", max_retries=0, timeout=120)


def decisions(endpoint: str) -> dict[str, float]:
    text = httpx.get(endpoint.removesuffix("/v1") + "/metrics").text
    pattern = r'^tandem_router_prefill_decisions_total\{path="(\w+)",reason="(\w+)"\} (\S+)$'
    found = re.findall(pattern, text, flags=re.MULTILINE)
    return {f"{path}/{reason}": float(value) for path, reason, value in found}


def ask(endpoint: str, prompt: str, temperature: float = 0.0, **extra: Any) -> Any:
    messages: Any = [{"role": "user", "content": prompt}]
    return client(endpoint).chat.completions.create(
        model=MODEL, messages=messages, max_tokens=48, temperature=temperature,
        extra_body={"return_token_ids": True}, **extra,
    )  # fmt: skip


def test_disaggregated_equals_aggregated_token_for_token(clusters: dict[str, str]) -> None:
    before = decisions(clusters["sim-disagg"]).get("remote/long_prompt", 0.0)
    for prompt in (LONG_PROMPT, SHORT_PROMPT + " " + LONG_PROMPT[:400]):
        remote = ask(clusters["sim-disagg"], prompt)
        local = ask(clusters["sim-local"], prompt)
        ids = (remote.choices[0].model_extra or {})["token_ids"]
        assert ids == (local.choices[0].model_extra or {})["token_ids"]
        assert remote.choices[0].message.content == local.choices[0].message.content
        assert remote.usage == local.usage
        # Real o200k ids of ordinary text, never a stop token: the answer runs to max_tokens.
        assert len(ids) == 48 and ids[:3] == list(HARMONY_FINAL_HEADER)
        assert all(0 <= t < O200K_ORDINARY for t in ids[3:])
        assert remote.choices[0].finish_reason == "length"
        assert remote.usage is not None and remote.usage.prompt_tokens > 64
    # Both went through the prefill pool (the handoff ran), none fell back to local.
    assert decisions(clusters["sim-disagg"]).get("remote/long_prompt", 0.0) == before + 2
    assert decisions(clusters["sim-local"]).get("remote/long_prompt", 0.0) == 0.0


def test_streaming_equals_whole_and_seed_changes_sampled_answers(
    clusters: dict[str, str],
) -> None:
    endpoint = clusters["sim-disagg"]
    whole = ask(endpoint, LONG_PROMPT)
    stream = client(endpoint).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": LONG_PROMPT}], max_tokens=48,
        temperature=0, stream=True, stream_options={"include_usage": True},
    )  # fmt: skip
    content, usage = "", None
    for chunk in stream:
        if chunk.choices:
            content += chunk.choices[0].delta.content or ""
        usage = chunk.usage or usage
    assert content == whole.choices[0].message.content
    assert usage is not None and usage.completion_tokens == 48
    # With sampling, the seed enters the chain (on the prefill worker) and the decode
    # worker continues it: same seed, same answer; another seed, another one.
    seeded = [ask(endpoint, LONG_PROMPT, temperature=1.0, seed=s) for s in (7, 7, 8)]
    texts = [r.choices[0].message.content for r in seeded]
    assert texts[0] == texts[1] != texts[2]
    assert texts[0] != whole.choices[0].message.content
