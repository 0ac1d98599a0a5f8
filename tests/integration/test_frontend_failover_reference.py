"""Killing workers of the reference engine under traffic. The prefill worker (KV over
NIXL) during a stream of requests: no request fails; the router falls back to local
prefill while the worker is gone and the supervisor restarts it. A decode worker in the
middle of a stream: the stream goes on, on the other one, with the same tokens. Numbers
are printed (run with -s)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tandem.api.validate import load_inference_cluster
from tandem.runtime.launcher import detach, down
from tandem.runtime.state import cluster_dir, read_state

pytestmark = [
    pytest.mark.integration,
]

EXAMPLE = Path(__file__).parents[2] / "manifests" / "examples" / "reference-cpu.yaml"
# Failover is the router's and the supervisor's business, not the model's: the random model
# restarts in a second (random-model.yaml). test_openai_reference.py runs SmolLM2.
RANDOM_MODEL = Path(__file__).with_name("random-model.yaml")


def test_prefill_worker_killed_mid_stream(
    tmp_path: Path, kill_mid_traffic: Callable[..., Any]
) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["name"] = "failover"
    doc["spec"]["model"] = yaml.safe_load(RANDOM_MODEL.read_text())
    doc["spec"]["model"].update({"maxInputTokens": 1024, "maxOutputTokens": 64})
    doc["spec"]["kvTransfer"]["timeoutSeconds"] = 5  # a dead peer fails the pull quickly
    path = tmp_path / "failover.yaml"
    path.write_text(yaml.safe_dump(doc))
    home = tmp_path / "home"
    lines: list[str] = []
    assert detach(path, load_inference_cluster(path), port=0, progress=lines.append,
                  home=home, timeout_s=300) == 0, lines  # fmt: skip
    try:
        state = read_state(cluster_dir("failover", home))
        assert state is not None
        endpoint = state.endpoint
        prefill_pid = next(w.pid for w in state.workers if w.component == "prefill")
        total, concurrency, kill_after = 40, 4, 10

        def body_for(n: int) -> dict[str, Any]:
            return {
                "model": "reference",
                "messages": [{"role": "user", "content": f"request {n} " * 8}],
                "max_tokens": 16,
                "temperature": 0,
            }

        outcome = kill_mid_traffic(
            endpoint,
            prefill_pid,
            total=total,
            concurrency=concurrency,
            kill_after=kill_after,
            body_for=body_for,
            timeout_s=120,
        )
        statuses, latencies, decisions = outcome.statuses, outcome.latencies, outcome.decisions
        print(f"\nreference engine, prefill worker SIGKILLed at request {kill_after} of {total} "
              f"(concurrency {concurrency}): statuses {sorted(set(statuses))}, "
              f"decisions {decisions}, slowest request {max(latencies):.2f}s")  # fmt: skip
        assert statuses == [200] * total
        assert sum(decisions.values()) == total
        assert decisions.get("remote/long_prompt", 0) >= 1
        assert sum(v for k, v in decisions.items() if k.startswith("local/")) >= 1
    finally:
        down("failover", progress=lambda _: None, home=home)


@pytest.mark.parametrize(
    "sampling",
    # Seed 1 at 0.9 samples a few hundred tokens before an EOS on this random model.
    [{"temperature": 0}, {"temperature": 0.9, "top_p": 0.95, "seed": 1}],
    ids=["greedy", "sampled-with-seed"],
)
def test_a_decode_worker_killed_mid_stream_leaves_the_stream_whole(
    detached_clusters: Any, sampling: dict[str, float]
) -> None:
    """Greedy output on the reference engine is a function of the text so far, and a
    sampled token's draw depends only on the request's seed and its position: the stream
    the kill catches, resumed on the other decode worker from its prompt plus the tokens
    already sent, is byte for byte (the byte tokenizer: token for token) the
    uninterrupted run's."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["name"] = "migrate-sampled" if sampling["temperature"] else "migrate"
    doc["spec"]["model"] = yaml.safe_load(RANDOM_MODEL.read_text())
    doc["spec"]["prefill"].update(replicas=0, minReplicas=0)
    doc["spec"]["decode"].update(replicas=2, minReplicas=2, maxReplicas=2)
    # A larger random model: each token costs ~15 ms, so the stream is still running when
    # the kill lands (seed 1: greedy, this prompt runs to max_tokens without an EOS).
    doc["spec"]["engine"]["options"] = {
        "num_layers": 8, "hidden": 512, "intermediate": 1024, "seed": 1,
    }  # fmt: skip
    endpoint = detached_clusters.up(doc)
    base = endpoint.removesuffix("/v1")
    body = {"model": "reference", "prompt": "the stream goes on " * 4, "max_tokens": 480,
            "stream": True, **sampling}  # fmt: skip

    def stream(kill_after_chunks: int | None) -> tuple[str, str | None, bool]:
        text, finish, killed = "", None, False
        with httpx.stream("POST", f"{endpoint}/completions", json=body, timeout=120) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                event = json.loads(line.removeprefix("data: "))
                assert "error" not in event, event
                choice = event["choices"][0]
                text += choice["text"]
                finish = choice["finish_reason"] or finish
                if kill_after_chunks is not None and not killed and len(text) >= kill_after_chunks:
                    os.kill(
                        _serving_decode_pid(base, doc["metadata"]["name"], detached_clusters.home),
                        signal.SIGKILL,
                    )
                    killed = True
        return text, finish, killed

    whole, finish, _ = stream(None)
    assert len(whole) >= 160, f"the answer ended ({finish}) too early to be caught mid-way"
    resumed, resumed_finish, killed = stream(kill_after_chunks=40)
    assert killed
    assert (resumed, resumed_finish) == (whole, finish)
    migrations = metric(httpx.get(f"{base}/metrics").text, "tandem_router_migrations_total",
                        outcome="resumed")  # fmt: skip
    assert migrations == 1
    print(f"\n{sampling}: stream of {len(whole)} tokens, decode worker SIGKILLed after 40: "
          f"resumed once, identical to the uninterrupted run")  # fmt: skip


def _serving_decode_pid(base: str, name: str, home: Path) -> int:
    """The decode worker the frontend has the one open stream on."""
    workers = httpx.get(f"{base}/readyz").json()["workers"]
    (address,) = [w["address"] for w in workers if w.get("in_flight", 0) > 0]
    state = read_state(cluster_dir(name, home))
    assert state is not None
    port = int(address.rsplit(":", 1)[1])
    return next(w.pid for w in state.workers if w.component == "decode" and w.port == port)


def metric(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{{wanted}}} "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
