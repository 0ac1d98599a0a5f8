"""Monitoring the chart installs (metrics.podMonitor, metrics.prometheusRule): PodMonitors
that find the pods the operator renders, objects the prometheus-operator CRDs accept, and
alert rules that `promtool` checks and unit-tests (tests/monitoring/rules_test.yaml) over
series named and labelled as the code exports them.

promtool and the CRDs come from tests/monitoring/build-promtool.sh (`make test` runs it).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import promql_parser
import pytest
import yaml
from prometheus_client import REGISTRY, CollectorRegistry, Histogram
from prometheus_client.utils import floatToGoString

import tandem_operator.metrics  # noqa: F401  (registers the operator's series)
from tandem.api.v1alpha1 import PoolRole
from tandem.api.validate import load_inference_cluster
from tandem.frontend.metrics import FrontendMetrics, TenantMetrics
from tandem.router.metrics import RouterMetrics
from tandem.security import CredentialBundle, CredentialStore, issue, write_bundle
from tandem.security.credentials import register_expiry_metric, utc_now
from tandem.worker.metrics import WorkerMetrics
from tandem_operator import names
from tandem_operator.render.children import (
    PoolHandle,
    render_cluster_children,
    render_pool_children,
)
from tandem_operator.render.pods import RenderSettings

from .test_chart import CHART, REPO, helm, render
from .test_dashboard import selectors, vector_selectors

MONITORING = REPO / "tests" / "monitoring"
PROMTOOL = MONITORING / "bin" / "promtool"
CRDS = MONITORING / "bin" / "crds"
RULES = CHART / "monitoring" / "rules.yaml"
RULE_TESTS = MONITORING / "rules_test.yaml"
ENABLED = (
    "metrics.podMonitor.enabled=true",
    "metrics.serviceMonitor.enabled=true",
    "metrics.prometheusRule.enabled=true",
    "metrics.monitoringLabels.release=kube-prometheus-stack",
)
# The target labels prometheus-operator gives every target of a PodMonitor and of a
# ServiceMonitor (besides the relabelings the monitor asks for).
POD_TARGET_LABELS = frozenset({"namespace", "pod", "container", "endpoint", "job", "instance"})
SERVICE_TARGET_LABELS = POD_TARGET_LABELS | {"service"}
# Which pods each PodMonitor must find, and the port serving their /metrics.
METRICS_PORTS = {
    "frontend": names.FRONTEND_METRICS_PORT,
    "worker": names.WORKER_HTTP_PORT,
}

needs_promtool = pytest.mark.skipif(
    not PROMTOOL.exists(), reason="promtool not built (tests/monitoring/build-promtool.sh)"
)


def monitoring_objects(*sets: str) -> list[dict[str, Any]]:
    return [d for d in render(*ENABLED, *sets) if d["apiVersion"] == "monitoring.coreos.com/v1"]


def pod_monitors(*sets: str) -> dict[str, dict[str, Any]]:
    """The PodMonitors by the component their selector names."""
    return {
        d["spec"]["selector"]["matchLabels"][names.LABEL_COMPONENT]: d
        for d in monitoring_objects(*sets)
        if d["kind"] == "PodMonitor"
    }


def operator_pod_templates() -> list[dict[str, Any]]:
    """The pod templates the operator renders for an example cluster."""
    cr = load_inference_cluster(REPO / "manifests" / "examples" / "reference-cpu.yaml")
    objects = render_cluster_children(cr, RenderSettings(), include_pool_replicas=True)
    for role in PoolRole:
        handle = PoolHandle(names.pool_name(cr.metadata.name, role), f"{role.value}-uid", 1)
        objects += render_pool_children(cr, role, handle, RenderSettings())
    return [o["spec"]["template"] for o in objects if o["kind"] == "Deployment"]


def test_monitoring_is_opt_in_and_the_rules_need_what_they_read() -> None:
    kinds = {d["kind"] for d in render()}
    assert not kinds & {"PodMonitor", "PrometheusRule", "ServiceMonitor"}
    alone = helm(
        "template", "t", str(CHART), "--set", "metrics.prometheusRule.enabled=true", check=False
    )
    assert alone.returncode != 0
    assert "metrics.prometheusRule.enabled needs metrics.podMonitor.enabled" in alone.stderr
    objects = monitoring_objects()
    assert sorted(d["kind"] for d in objects) == [
        "PodMonitor",
        "PodMonitor",
        "PrometheusRule",
        "ServiceMonitor",
    ]
    for d in objects:
        assert d["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_pod_monitors_find_the_pods_the_operator_renders_and_their_metrics_port() -> None:
    monitors = pod_monitors()
    assert set(monitors) == set(METRICS_PORTS)
    templates = operator_pod_templates()
    for component, monitor in monitors.items():
        selector = monitor["spec"]["selector"]["matchLabels"]
        found = [t for t in templates if selector.items() <= t["metadata"]["labels"].items()]
        roles = {t["metadata"]["labels"][names.LABEL_ROLE] for t in found}
        assert roles == ({"frontend"} if component == "frontend" else {"prefill", "decode"})
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        for template in found:
            ports = {
                p["name"]: p["containerPort"]
                for c in template["spec"]["containers"]
                for p in c.get("ports", [])
            }
            assert ports[endpoint["port"]] == METRICS_PORTS[component]
            # Each relabeling reads a label the pod has (Prometheus's sanitized name).
            labels = {
                "__meta_kubernetes_pod_label_" + k.replace(".", "_").replace("/", "_")
                for k in template["metadata"]["labels"]
            } | {"__meta_kubernetes_namespace"}
            for relabel in endpoint["relabelings"]:
                assert set(relabel["sourceLabels"]) <= labels, relabel


def test_pod_monitors_look_only_where_the_operator_watches() -> None:
    assert all(m["spec"]["namespaceSelector"] == {"any": True} for m in pod_monitors().values())
    watched = pod_monitors("operator.watchNamespaces={serving,batch}")
    for monitor in watched.values():
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["serving", "batch"]}


def _known_fields(value: Any, schema: dict[str, Any], path: str) -> Iterator[str]:
    """Fields the schema does not name (a structural schema would prune them silently)."""
    if isinstance(value, dict) and "properties" in schema:
        for key, sub in value.items():
            if key not in schema["properties"]:
                yield f"{path}.{key}"
            else:
                yield from _known_fields(sub, schema["properties"][key], f"{path}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            yield from _known_fields(item, schema["items"], f"{path}[{index}]")


@pytest.mark.skipif(
    not CRDS.exists(), reason="CRDs not copied (tests/monitoring/build-promtool.sh)"
)
def test_the_monitoring_objects_match_the_prometheus_operator_crds() -> None:
    schemas = {}
    for path in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
        schemas[crd["spec"]["names"]["kind"]] = version["schema"]["openAPIV3Schema"]
    for obj in monitoring_objects("operator.watchNamespaces={serving}"):
        schema = schemas[obj["kind"]]
        # Not jsonschema.validate: that checks the schema first, and Go's regexes in it
        # (a "(?i)" mid-pattern) are not Python's.
        jsonschema.Draft7Validator(schema).validate(obj)
        assert not list(_known_fields(obj["spec"], schema["properties"]["spec"], "spec"))


def test_the_prometheus_rule_carries_the_rules_file() -> None:
    (rule,) = [d for d in monitoring_objects() if d["kind"] == "PrometheusRule"]
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert alerts == {
        "TandemSLOFastBurn",
        "TandemSLOSlowBurn",
        "TandemKVHandoffFailing",
        "TandemPoolAtMaxReplicas",
        "TandemWorkersNotReady",
        "TandemCertificateExpiringSoon",
    }


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PROMTOOL), *args], capture_output=True, text=True, timeout=120, check=False
    )


@needs_promtool
def test_promtool_accepts_the_rendered_rules(tmp_path: Path) -> None:
    (rule,) = [d for d in monitoring_objects() if d["kind"] == "PrometheusRule"]
    rendered = tmp_path / "rules.yaml"
    rendered.write_text(yaml.safe_dump(rule["spec"]))
    result = promtool("check", "rules", "--lint-fatal", str(rendered))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_the_rules_pass_their_promtool_unit_tests() -> None:
    result = promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------- the series the rules read


def exported_series(tmp_path: Path) -> dict[str, Any]:
    """Every series name the frontend, workers and operator define, to its collector."""
    registry = CollectorRegistry()
    for metrics in (FrontendMetrics, TenantMetrics, RouterMetrics, WorkerMetrics):
        metrics(registry)
    write_bundle(tmp_path, CredentialBundle.of(issue("demo", utc_now())))
    register_expiry_metric(registry, CredentialStore(tmp_path))
    return {**REGISTRY._names_to_collectors, **registry._names_to_collectors}


def label_names(collector: Any, series: str) -> set[str]:
    return set(getattr(collector, "_labelnames", ())) | (
        {"le"} if series.endswith("_bucket") else set()
    )


def target_labels(series: str) -> frozenset[str]:
    """The labels a scrape adds to ``series``: the operator's ServiceMonitor's, or the
    chart's PodMonitors' (with their relabelings) for the frontends and workers."""
    if series.startswith("tandem_operator_"):
        return SERVICE_TARGET_LABELS
    (endpoint,) = pod_monitors()["frontend"]["spec"]["podMetricsEndpoints"]
    return POD_TARGET_LABELS | {r["targetLabel"] for r in endpoint["relabelings"]}


def test_the_unit_tests_feed_series_as_pods_export_them(tmp_path: Path) -> None:
    exported = exported_series(tmp_path)
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    inputs = [s["series"] for t in tests for s in t["input_series"]]
    assert inputs
    for text in inputs:
        selector = promql_parser.parse(text)
        assert isinstance(selector, promql_parser.VectorSelector), text
        (name,) = selectors(selector)
        assert name in exported, f"{name} is exported by nothing"
        collector = exported[name]
        labels = {m.name: m.value for m in selector.matchers.matchers}
        assert set(labels) == label_names(collector, name) | target_labels(name), text
        if isinstance(collector, Histogram) and "le" in labels:
            bounds = {floatToGoString(b) for b in collector._upper_bounds}  # type: ignore[no-untyped-call]
            assert labels["le"] in bounds, f"{text}: no such bucket"


def test_the_rules_read_only_exported_series_and_labels(tmp_path: Path) -> None:
    exported = exported_series(tmp_path)
    groups = yaml.safe_load(RULES.read_text())["groups"]
    recorded = {r["record"] for g in groups for r in g["rules"] if "record" in r}
    known = set().union(*(label_names(c, n) for n, c in exported.items()))
    read: set[str] = set()
    for rule in (r for g in groups for r in g["rules"]):
        for selector in vector_selectors(promql_parser.parse(rule["expr"])):
            (name,) = selectors(selector)
            assert name in exported or name in recorded, name
            read.add(name)
            for matcher in selector.matchers.matchers:
                assert matcher.name in known | target_labels(name), (
                    rule.get("alert") or rule.get("record"),
                    matcher.name,
                )
    assert recorded <= read  # no recording rule nobody reads
