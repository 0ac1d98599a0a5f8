"""Killing the prefill worker (reference engine, KV over NIXL) during a stream of
requests: no request fails; the router falls back to local prefill while the worker is
gone and the supervisor restarts it. Numbers are printed (run with -s)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

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
