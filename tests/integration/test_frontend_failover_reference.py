"""Killing the prefill worker (reference engine, KV over NIXL) during a stream of
requests: no request fails; the router falls back to local prefill while the worker is
gone and the supervisor restarts it. Numbers are printed (run with -s)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from pathlib import Path

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


def test_prefill_worker_killed_mid_stream(tmp_path: Path) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["name"] = "failover"
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
        statuses: list[int] = []
        latencies: list[float] = []

        async def drive() -> None:
            sent = 0
            async with httpx.AsyncClient(base_url=endpoint, timeout=120) as client:

                async def one() -> None:
                    nonlocal sent
                    while sent < total:
                        sent += 1
                        if sent == kill_after:
                            os.kill(prefill_pid, signal.SIGKILL)
                        body = {
                            "model": "reference",
                            "messages": [{"role": "user", "content": f"request {sent} " * 8}],
                            "max_tokens": 16,
                            "temperature": 0,
                        }
                        started = time.monotonic()
                        response = await client.post("/chat/completions", json=body)
                        latencies.append(time.monotonic() - started)
                        statuses.append(response.status_code)

                await asyncio.gather(*(one() for _ in range(concurrency)))

        asyncio.run(drive())
        metrics = httpx.get(endpoint.removesuffix("/v1") + "/metrics").text
        decisions = {
            f"{p}/{r}": float(v)
            for p, r, v in re.findall(
                r'^tandem_router_prefill_decisions_total\{path="(\w+)",reason="(\w+)"\} (\S+)$',
                metrics,
                flags=re.MULTILINE,
            )
        }
        print(f"\nreference engine, prefill worker SIGKILLed at request {kill_after} of {total} "
              f"(concurrency {concurrency}): statuses {sorted(set(statuses))}, "
              f"decisions {decisions}, slowest request {max(latencies):.2f}s")  # fmt: skip
        assert statuses == [200] * total
        assert sum(decisions.values()) == total
        assert decisions.get("remote/long_prompt", 0) >= 1
        assert sum(v for k, v in decisions.items() if k.startswith("local/")) >= 1
    finally:
        down("failover", progress=lambda _: None, home=home)
