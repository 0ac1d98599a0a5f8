"""One request's whole trace, found in a real Jaeger.

Jaeger v1.75.0 (built from Go modules by tests/tracing/build-jaeger.sh) runs all-in-one:
an OTLP/gRPC receiver and the query API on 127.0.0.1 ports, in-memory storage. ``tandem
up --otlp-endpoint`` starts the CPU example (SmolLM2 in the reference engine, a prefill
and a decode worker, the KV moved between them); one chat completion goes through the
official openai client; the test then reads that request's trace back through Jaeger's
HTTP query API and checks every span is there, in one trace, under the right parent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from tandem.devcluster.ports import allocate_ports
from tandem.runtime.state import cluster_dir, read_state

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]
BUILD_SCRIPT = REPO / "tests" / "tracing" / "build-jaeger.sh"
JAEGER = REPO / "tests" / "tracing" / "bin" / "jaeger"
EXAMPLE = REPO / "manifests" / "examples" / "reference-cpu.yaml"
CLI = (
    "import argparse, sys\n"
    "from tandem.cli import local\n"
    "parser = argparse.ArgumentParser(prog='tandem')\n"
    "local.register(parser.add_subparsers(required=True))\n"
    "args = parser.parse_args(sys.argv[1:])\n"
    "sys.exit(args.handler(args))\n"
)
# Receiver, storage and query only: no sampling endpoints, no self-telemetry ports.
JAEGER_CONFIG = """
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query_port}
    grpc:
      endpoint: 127.0.0.1:{query_grpc_port}
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{otlp_port}
processors:
  batch:
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""
# Spans reach Jaeger in batches (every 5 s per process, three processes).
TRACE_WAIT_S = 90.0
SPANS = {
    "frontend.chat", "frontend.tokenize", "router.route", "router.prefill", "router.decode",
    "worker.prefill", "worker.decode", "decode.first_token", "kv.transfer", "decode.stream",
}  # fmt: skip
# SmolLM2's chat template makes even a one-line question ~30 tokens: over this, and on a
# cold prefix cache, the router sends it to the prefill worker.
MIN_PREFILL_TOKENS = 16


@dataclass(frozen=True)
class Jaeger:
    otlp_endpoint: str
    query_url: str


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jaeger]:
    # A no-op when tests/tracing is unchanged since the last build (make test builds first).
    built = subprocess.run([str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    if built.returncode != 0:
        pytest.fail(f"{BUILD_SCRIPT} failed:\n{built.stderr[-4000:]}", pytrace=False)
    otlp_port, query_port, query_grpc_port = allocate_ports(3)
    directory = tmp_path_factory.mktemp("jaeger")
    config = directory / "jaeger.yaml"
    config.write_text(
        JAEGER_CONFIG.format(
            otlp_port=otlp_port, query_port=query_port, query_grpc_port=query_grpc_port
        )
    )
    log = (directory / "jaeger.log").open("wb")
    process = subprocess.Popen(
        [str(JAEGER), "--config", f"file:{config}"], stdout=log, stderr=subprocess.STDOUT
    )
    query_url = f"http://127.0.0.1:{query_port}"
    try:
        wait_until_serving(process, query_url, directory / "jaeger.log")
        yield Jaeger(f"http://127.0.0.1:{otlp_port}", query_url)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def wait_until_serving(process: subprocess.Popen[bytes], query_url: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"jaeger exited ({process.returncode}):\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(f"{query_url}/api/services", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail(f"jaeger's query API never answered:\n{log.read_text()[-4000:]}")


@pytest.fixture(scope="module")
def endpoint(jaeger: Jaeger, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`tandem up --detach --otlp-endpoint` on the CPU example; its OpenAI base URL."""
    directory = tmp_path_factory.mktemp("traced")
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["name"] = "traced"
    doc["spec"]["model"].update({"maxInputTokens": 1024, "maxOutputTokens": 64})
    doc["spec"]["prefill"].update({"replicas": 1})
    doc["spec"]["frontend"]["disaggregation"] = {"minPrefillTokens": MIN_PREFILL_TOKENS}
    manifest = directory / "traced.yaml"
    manifest.write_text(yaml.safe_dump(doc))
    home = directory / "home"
    env = {**os.environ, "TANDEM_HOME": str(home)}

    def tandem(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", CLI, *args], env=env, capture_output=True, text=True
        )

    up = tandem(
        "up", "-f", str(manifest), "--detach", "--port", "0",
        "--otlp-endpoint", jaeger.otlp_endpoint,
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = read_state(cluster_dir("traced", home))
        assert state is not None
        yield state.endpoint
    finally:
        tandem("down", "--name", "traced")


def find_trace(jaeger: Jaeger, request_id: str) -> dict[str, Any]:
    """The trace whose frontend span carries ``request_id``, once every span in
    ``SPANS`` has arrived (or whatever arrived by the deadline)."""
    tags = json.dumps({"tandem.request_id": request_id})
    params = {"service": "tandem-frontend", "tags": tags, "lookback": "1h", "limit": "5"}
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + TRACE_WAIT_S
    while time.monotonic() < deadline:
        reply = httpx.get(f"{jaeger.query_url}/api/traces", params=params, timeout=10)
        reply.raise_for_status()
        found = reply.json()["data"] or []
        if len(found) == 1 and {s["operationName"] for s in found[0]["spans"]} >= SPANS:
            break
        time.sleep(0.5)
    assert len(found) == 1, f"{len(found)} traces for request {request_id}"
    return found[0]


@dataclass(frozen=True)
class Span:
    span_id: str
    name: str
    service: str
    parent: str | None
    tags: dict[str, Any]


def spans_of(trace: dict[str, Any]) -> dict[str, Span]:
    """The trace's spans by operation name (each name once in this request)."""
    out: dict[str, Span] = {}
    for raw in trace["spans"]:
        parents = [r["spanID"] for r in raw["references"] if r["refType"] == "CHILD_OF"]
        assert {r["traceID"] for r in raw["references"]} <= {trace["traceID"]}
        span = Span(
            raw["spanID"],
            raw["operationName"],
            trace["processes"][raw["processID"]]["serviceName"],
            parents[0] if parents else None,
            {t["key"]: t["value"] for t in raw["tags"]},
        )
        assert span.name not in out, f"{span.name} twice in one request's trace"
        out[span.name] = span
    return out


def test_one_request_has_one_trace_from_frontend_to_decode(jaeger: Jaeger, endpoint: str) -> None:
    request_id = f"trace-{uuid.uuid4().hex[:12]}"
    client = openai.OpenAI(base_url=endpoint, api_key="unused", max_retries=0)
    reply = client.chat.completions.create(
        model="reference",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=8,
        temperature=0,
        stream=True,
        extra_headers={"x-request-id": request_id},
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in reply if chunk.choices)
    assert text

    spans = spans_of(find_trace(jaeger, request_id))

    def child(name: str, parent: str, service: str) -> Span:
        assert name in spans, f"no {name} span; got {sorted(spans)}"
        span = spans[name]
        assert span.parent == spans[parent].span_id, f"{name} is not a child of {parent}"
        assert span.service == service, (name, span.service)
        return span

    root = spans["frontend.chat"]
    assert root.parent is None and root.service == "tandem-frontend"
    assert root.tags["tandem.request_id"] == request_id
    assert root.tags["tandem.route.path"] == "remote", root.tags
    child("frontend.tokenize", "frontend.chat", "tandem-frontend")
    route = child("router.route", "frontend.chat", "tandem-frontend")
    assert route.tags["tandem.route.path"] == "remote"
    assert route.tags["tandem.route.reason"] == root.tags["tandem.route.reason"]
    assert route.tags["tandem.route.prompt_tokens"] >= MIN_PREFILL_TOKENS
    child("router.prefill", "frontend.chat", "tandem-frontend")
    child("worker.prefill", "router.prefill", "tandem-prefill")
    child("router.decode", "frontend.chat", "tandem-frontend")
    decode = child("worker.decode", "router.decode", "tandem-decode")
    assert decode.tags["tandem.remote_kv"] is True
    first = child("decode.first_token", "worker.decode", "tandem-decode")
    assert first.tags["tandem.prefilled_locally"] is False
    kv = child("kv.transfer", "decode.first_token", "tandem-decode")
    assert kv.tags["tandem.kv.bytes"] > 0
    stream = child("decode.stream", "worker.decode", "tandem-decode")
    assert stream.tags["tandem.generated_tokens"] >= 1
