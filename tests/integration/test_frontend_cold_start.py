"""Scale from zero through real processes: a frontend whose decode pool is empty stays
ready, holds the first request while a reference worker starts, and answers it through
the official client; with no worker within the bound the client gets a clean 503. Last,
the whole local stack (``tandem up``, its autoscaler starting the worker).

The worker's membership is a file, written the moment the worker serves, as the
EndpointSlice of a pod that turned Ready is in a cluster."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tandem.router.membership import Member, write_members
from tandem.router.policy import WorkerRole

pytestmark = pytest.mark.integration

RANDOM_MODEL = Path(__file__).with_name("random-model.yaml")
AUTOSCALING_EXAMPLE = (
    Path(__file__).parents[2] / "manifests/examples/reference-cpu-autoscaling.yaml"
)
ENGINE = {"num_layers": 2, "hidden": 32, "num_heads": 2, "num_kv_heads": 1, "head_dim": 16}
START_TIMEOUT_S = 120.0


def metric(text: str, name: str, **labels: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


@pytest.fixture
async def frontend(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A frontend process over an empty decode pool (``file://`` membership), waiting
    ``request.param`` seconds for a cold start; yields its base URL."""
    members = tmp_path / "decode.json"
    write_members(members, [])
    doc = {
        "contractVersion": 1,
        "model": yaml.safe_load(RANDOM_MODEL.read_text()),
        "workers": {"decode": f"file://{members}"},
        "frontend": {"coldStartTimeoutSeconds": request.param},
    }
    config = tmp_path / "frontend.json"
    config.write_text(json.dumps(doc))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tandem.frontend",
        f"--config={config}",
        "--port=0",
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(START_TIMEOUT_S):  # a liveness bound
            line = (await proc.stdout.readline()).decode()
        assert line.startswith("READY "), f"frontend did not start: {line!r}"
        yield f"http://127.0.0.1:{line.split()[1]}"
    finally:
        proc.terminate()
        await proc.wait()


def ask(base: str) -> Any:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=300)
    return client.chat.completions.create(
        model="reference", messages=[{"role": "user", "content": "hi"}], max_tokens=4
    )


@pytest.mark.parametrize("frontend", [300], indirect=True)
async def test_the_first_request_waits_for_a_starting_worker_and_is_answered(
    frontend: str, tmp_path: Path, worker_launcher: Any
) -> None:
    async with httpx.AsyncClient(base_url=frontend, timeout=30) as http:
        assert (await http.get("/readyz")).status_code == 200  # ready with no worker
        first = asyncio.create_task(asyncio.to_thread(ask, frontend))
        while not metric(
            (await http.get("/metrics")).text, "tandem_router_requests_waiting_for_worker"
        ):
            assert not first.done(), first.result()
            await asyncio.sleep(0.1)
        waiting = (await http.get("/metrics")).text
        # What the autoscaler reads: one request of decode demand.
        assert metric(waiting, "tandem_router_queue_depth_requests", pool="decode") == 1

        worker = await worker_launcher.start(
            "decode-0",
            ["--role=decode", "--worker-id=decode-0", f"--engine-options={json.dumps(ENGINE)}"],
            log=tmp_path / "decode.log",
            env=os.environ,
        )
        write_members(
            tmp_path / "decode.json", [Member(f"127.0.0.1:{worker.port}", WorkerRole.DECODE)]
        )
        reply = await asyncio.wait_for(first, START_TIMEOUT_S)
        assert reply.choices[0].finish_reason in {"length", "stop"}

        after = (await http.get("/metrics")).text
    assert metric(after, "tandem_router_cold_start_wait_seconds_count", outcome="served") == 1
    assert metric(after, "tandem_router_requests_waiting_for_worker") == 0
    assert metric(after, "tandem_frontend_requests_total", status="503") == 0


@pytest.mark.parametrize("frontend", [1], indirect=True)
async def test_no_worker_within_the_bound_is_a_503_with_retry_after(frontend: str) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        await asyncio.to_thread(ask, frontend)
    response = caught.value.response
    assert response.status_code == 503
    assert response.headers["retry-after"].isdigit()
    error = response.json()["error"]
    assert error["code"] == "no_worker_started"
    assert "no decode worker started within 1 s" in error["message"]
    async with httpx.AsyncClient(base_url=frontend, timeout=30) as http:
        assert (await http.get("/readyz")).status_code == 200  # still taking requests
        text = (await http.get("/metrics")).text
    assert metric(text, "tandem_router_cold_start_wait_seconds_count", outcome="timed_out") == 1


def test_tandem_up_at_zero_answers_the_first_request(detached_clusters: Any) -> None:
    doc = yaml.safe_load(AUTOSCALING_EXAMPLE.read_text())
    doc["metadata"]["name"] = "zero-itest"
    spec = doc["spec"]
    spec["model"] = yaml.safe_load(RANDOM_MODEL.read_text())
    spec["prefill"].update(replicas=0, minReplicas=0)
    spec["decode"].update(replicas=0, minReplicas=0)  # no worker at all to start with
    spec["autoscaling"]["intervalSeconds"] = 1
    endpoint = detached_clusters.up(doc)
    base = endpoint.removesuffix("/v1")
    assert httpx.get(f"{base}/readyz", timeout=30).status_code == 200
    reply = ask(base)
    assert reply.choices[0].finish_reason in {"length", "stop"}
    text = httpx.get(f"{base}/metrics", timeout=30).text
    assert metric(text, "tandem_router_cold_start_wait_seconds_count", outcome="served") == 1
