"""The official openai client against `tandem up` with the reference engine, and
disaggregated generation equal, token for token over HTTP, to generation with the
prefill pool at zero; the metrics say which path each request took."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from tandem.api.validate import load_inference_cluster
from tandem.runtime.launcher import detach, down
from tandem.runtime.state import cluster_dir, read_state

pytestmark = [
    pytest.mark.integration,
]

EXAMPLE = Path(__file__).parents[2] / "manifests" / "examples" / "reference-cpu.yaml"
PROMPTS = [
    "Tell me about tandem bicycles and why two riders go faster.",
    "x" * 40,
    "The quick brown fox jumps over the lazy dog. " * 4,
    "Explain prefill and decode. " * 8,
]


def start(tmp_path: Path, name: str, prefill_replicas: int) -> str:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["model"].update({"maxInputTokens": 1024, "maxOutputTokens": 64})
    doc["spec"]["prefill"].update({"replicas": prefill_replicas})
    doc["spec"]["frontend"]["disaggregation"] = {"minPrefillTokens": 32}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    lines: list[str] = []
    code = detach(path, load_inference_cluster(path), port=0, progress=lines.append,
                  home=tmp_path / "home", timeout_s=600)  # fmt: skip
    assert code == 0, "\n".join(lines)
    state = read_state(cluster_dir(name, tmp_path / "home"))
    assert state is not None
    return state.endpoint


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    tmp_path = tmp_path_factory.mktemp("reference")
    started: list[str] = []
    try:
        endpoints = {}
        for name, replicas in (("disagg", 1), ("local", 0)):
            endpoints[name] = start(tmp_path, name, replicas)
            started.append(name)
        yield endpoints
    finally:
        for name in started:
            down(name, progress=lambda _: None, home=tmp_path / "home")


def decisions(endpoint: str) -> dict[str, float]:
    text = httpx.get(endpoint.removesuffix("/v1") + "/metrics").text
    found = re.findall(
        r'^tandem_router_prefill_decisions_total\{path="(\w+)",reason="(\w+)"\} (\S+)$',
        text,
        flags=re.MULTILINE,
    )
    return {f"{path}/{reason}": float(value) for path, reason, value in found}


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
    for prompt in PROMPTS:
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
    metrics = httpx.get(clusters["disagg"].removesuffix("/v1") + "/metrics").text
    kv_bytes = re.search(r"^tandem_router_kv_transfer_bytes_total (\S+)$", metrics, re.MULTILINE)
    assert kv_bytes is not None and float(kv_bytes.group(1)) > 0


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
