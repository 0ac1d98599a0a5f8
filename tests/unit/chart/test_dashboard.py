"""The Grafana dashboard in the chart (charts/tandem/dashboards/tandem.json): opt-in, the
usual sidecar ConfigMap, the panels platform teams need, and PromQL that names only
metrics real pods expose.

"Real pods expose" is tests/data/scraped-metric-names.json: the names the user's journey
(tests/e2e/test_user_journey.py, on the real node) scraped from the frontend, a worker
and the operator, which that test checks are all still exposed. Per-GPU series cannot
appear on CPU pods; those are checked against the code that defines them
(tandem.telemetry, read through a fake NVML with one GPU that reported an Xid).
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from tandem.telemetry import GpuMonitor, register_gpu_metrics

from .test_chart import render

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = REPO / "charts" / "tandem" / "dashboards" / "tandem.json"
SCRAPED = REPO / "tests" / "data" / "scraped-metric-names.json"
# Grafana's variables, replaced by values PromQL accepts before parsing.
VARIABLES = {"$__rate_interval": "5m", "$namespace": "ns", "${datasource}": "prometheus"}
NEEDED_PANELS = (
    "Request rate", "Time to first token", "Inter-token latency", "Queue depth per pool",
    "Replicas desired vs ready", "KV bytes moved", "KV transfer latency",
    "Prefill decisions by reason", "Autoscaler decisions", "GPU health",
)  # fmt: skip


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def vector_selectors(node: Any) -> Iterator[promql_parser.VectorSelector]:
    """Every vector selector in a parsed PromQL expression."""
    if isinstance(node, promql_parser.VectorSelector):
        yield node
        return
    for attr in ("lhs", "rhs", "expr", "vector_selector", "param"):
        child = getattr(node, attr, None)
        if child is not None and not isinstance(child, int | float | str):
            yield from vector_selectors(child)
    for child in getattr(node, "args", None) or ():
        yield from vector_selectors(child)


def selectors(node: Any) -> Iterator[str]:
    """Metric names of every vector selector in a parsed PromQL expression."""
    for selector in vector_selectors(node):
        assert selector.name is not None, f"{selector} names no metric"
        yield selector.name


def expressions() -> Iterator[tuple[str, str]]:
    for panel in panels():
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in VARIABLES.items():
                expr = expr.replace(variable, value)
            yield panel["title"], expr


def gpu_metric_names() -> set[str]:
    path = REPO / "tests" / "unit" / "telemetry" / "fake_nvml.py"
    spec = importlib.util.spec_from_file_location("tandem_tests_fake_nvml", path)
    assert spec is not None and spec.loader is not None
    fake = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = fake
    spec.loader.exec_module(fake)
    nvml = fake.FakeNvml(gpus=[fake.FakeGpu()])
    monitor = GpuMonitor.open(nvml)
    nvml.emit_xid(0, 79)
    while not monitor.xid_counts():
        pass  # the watcher thread counts it within its poll interval
    registry = CollectorRegistry()
    register_gpu_metrics(registry, monitor)
    text = generate_latest(registry).decode()
    monitor.close()
    return set(re.findall(r"^(tandem_gpu_\w+)[{ ]", text, flags=re.MULTILINE))


def test_every_panel_queries_only_metrics_real_pods_expose() -> None:
    scraped = json.loads(SCRAPED.read_text())
    exposed = set().union(*(set(names) for names in scraped["components"].values()))
    allowed = exposed | gpu_metric_names()
    used: set[str] = set()
    for title, expr in expressions():
        names = set(selectors(promql_parser.parse(expr)))
        assert names, (title, expr)
        assert names <= allowed, f"{title}: {sorted(names - allowed)} never scraped"
        used |= names
    # The GPU panels use series only a GPU node exposes, besides the CPU-visible ones.
    assert {"tandem_gpu_healthy", "tandem_gpu_xid_errors_total", "tandem_gpu_throttled"} <= used


def test_the_panels_platform_teams_need_are_there() -> None:
    titles = [p["title"] for p in panels()]
    for needed in NEEDED_PANELS:
        assert any(t.startswith(needed) or needed in t for t in titles), needed
    ids = [p["id"] for p in dashboard()["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels():
        assert panel["datasource"]["uid"] == "${datasource}"


def test_the_dashboard_configmap_is_opt_in_and_labelled_for_the_sidecar() -> None:
    assert "ConfigMap" not in {d["kind"] for d in render()}
    docs = render("metrics.grafanaDashboard.enabled=true", "metrics.grafanaDashboard.namespace=mon")
    config_map = next(d for d in docs if d["kind"] == "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == "mon"
    assert json.loads(config_map["data"]["tandem.json"]) == dashboard()
    yaml.safe_dump(config_map)  # a plain, serialisable object
