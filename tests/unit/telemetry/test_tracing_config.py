"""Turning traces on: the spec field and the `tandem up` flags become the same
OpenTelemetry environment on the operator's pods and the local runtime's processes;
without an endpoint nothing is set and no SDK is installed."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace

from tandem.api.v1alpha1 import InferenceCluster, PoolRole
from tandem.api.validate import ManifestError, load_inference_cluster, parse_object
from tandem.runtime.plan import count_workers, plan_local
from tandem.runtime.tracing_flags import add_tracing_flags, apply_tracing_flags, tracing_argv
from tandem.telemetry.tracing import (
    ENDPOINT_VAR,
    SAMPLER_ARG_VAR,
    configure_tracing,
    tracing_env,
)
from tandem_operator.render.pods import (
    RenderSettings,
    render_frontend_pod_template,
    render_worker_pod_template,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "manifests" / "examples" / "reference-cpu.yaml"
ENDPOINT = "http://otel-collector.monitoring:4317"


def cluster(tracing: dict[str, Any] | None = None) -> InferenceCluster:
    doc = load_inference_cluster(EXAMPLE).to_wire()
    doc["metadata"] |= {"uid": "ic-uid", "namespace": "serving"}
    if tracing is not None:
        doc["spec"]["observability"] = {"tracing": tracing}
    parsed = parse_object(doc)
    assert isinstance(parsed, InferenceCluster)
    return parsed


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def pod_envs(cr: InferenceCluster) -> list[dict[str, str]]:
    settings = RenderSettings()
    pods = [render_frontend_pod_template(cr, settings, "hash")]
    pods += [render_worker_pod_template(cr, role, settings, "hash") for role in PoolRole]
    return [env_of(c) for pod in pods for c in pod["spec"]["containers"]]


def test_the_env_is_empty_without_an_endpoint() -> None:
    assert tracing_env(None, 0.5) == {}
    assert tracing_env(ENDPOINT, 0.25) == {ENDPOINT_VAR: ENDPOINT, SAMPLER_ARG_VAR: "0.25"}


def test_the_operator_renders_tracing_into_the_frontend_and_every_worker() -> None:
    traced = pod_envs(cluster({"otlpEndpoint": ENDPOINT, "samplingRatio": 0.1}))
    assert len(traced) == 3
    for env in traced:
        assert env[ENDPOINT_VAR] == ENDPOINT and env[SAMPLER_ARG_VAR] == "0.1"
    for env in pod_envs(cluster()):
        assert ENDPOINT_VAR not in env and SAMPLER_ARG_VAR not in env


@pytest.mark.parametrize(
    ("tracing", "field"),
    [
        ({"otlpEndpoint": "otel:4317"}, "tracing.otlpEndpoint"),
        ({"otlpEndpoint": ENDPOINT, "samplingRatio": 1.5}, "tracing.samplingRatio"),
    ],
)
def test_the_api_refuses_a_bad_endpoint_or_ratio(tracing: dict[str, Any], field: str) -> None:
    with pytest.raises(ManifestError, match=field):
        cluster(tracing)


def flags(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_tracing_flags(parser)
    return parser.parse_args(argv)


def test_the_flags_override_the_spec_and_travel_to_the_runtime() -> None:
    args = flags("--otlp-endpoint", "http://127.0.0.1:4317")
    traced = apply_tracing_flags(cluster({"otlpEndpoint": ENDPOINT, "samplingRatio": 0.5}), args)
    tracing = traced.spec.observability.tracing
    assert (tracing.otlp_endpoint, tracing.sampling_ratio) == ("http://127.0.0.1:4317", 0.5)
    assert tracing_argv(args) == ("--otlp-endpoint", "http://127.0.0.1:4317")
    both = flags("--otlp-endpoint", ENDPOINT, "--trace-sampling-ratio", "0.2")
    assert flags(*tracing_argv(both)) == both
    untouched = cluster()
    assert apply_tracing_flags(untouched, flags()) is untouched
    with pytest.raises(ValueError):
        apply_tracing_flags(untouched, flags("--trace-sampling-ratio", "2"))


def test_the_local_runtime_gives_every_process_the_env(tmp_path: Path) -> None:
    cr = apply_tracing_flags(cluster(), flags("--otlp-endpoint", "http://127.0.0.1:4317"))
    plan = plan_local(
        cr,
        state_dir=tmp_path,
        frontend_port=8000,
        worker_ports=list(range(9000, 9000 + count_workers(cr))),
        python="python",
    )
    processes = [plan.frontend, *(w for pool in plan.pools.values() for w in pool.workers)]
    assert len(processes) == 1 + count_workers(cr)
    for process in processes:
        assert dict(process.env)[ENDPOINT_VAR] == "http://127.0.0.1:4317", process.name


def test_without_an_endpoint_no_provider_is_installed() -> None:
    before = trace.get_tracer_provider()
    assert configure_tracing("tandem-frontend", {SAMPLER_ARG_VAR: "1"}) is False
    assert trace.get_tracer_provider() is before
