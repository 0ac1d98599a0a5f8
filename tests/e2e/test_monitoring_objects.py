"""The chart's monitoring objects (ServiceMonitor, PodMonitors, PrometheusRule) on the real
test control plane with prometheus-operator's CRDs installed: the API server validates
them (schema, strict fields) as a cluster running prometheus-operator would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tandem.devcluster import DevCluster

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "tests" / "monitoring" / "bin" / "crds"

pytestmark = [
    pytest.mark.k8s,
    pytest.mark.parallel,
    pytest.mark.skipif(
        not CRDS.exists(), reason="CRDs not copied (tests/monitoring/build-promtool.sh)"
    ),
]


def test_the_api_server_accepts_the_monitoring_objects(
    k8s_cluster: DevCluster, e2e_cluster: Any
) -> None:
    k8s_cluster.kubectl("apply", "--server-side", "-f", str(CRDS))
    try:
        for plural in ("podmonitors", "servicemonitors", "prometheusrules"):
            k8s_cluster.wait_crd_established(f"{plural}.monitoring.coreos.com")
        rendered = e2e_cluster.helm(
            "template", "monitoring-e2e", str(REPO / "charts" / "tandem"), "-n", "default",
            "--set", "metrics.podMonitor.enabled=true",
            "--set", "metrics.serviceMonitor.enabled=true",
            "--set", "metrics.prometheusRule.enabled=true",
        )  # fmt: skip
        objects = [
            d
            for d in yaml.safe_load_all(rendered)
            if d and d["apiVersion"] == "monitoring.coreos.com/v1"
        ]
        applied = k8s_cluster.kubectl(
            "apply", "--server-side", "--dry-run=server", "--validate=strict", "-f", "-",
            input=yaml.safe_dump_all(objects), check=False,
        )  # fmt: skip
        assert applied.returncode == 0, applied.stderr
        assert sorted(line.split()[0] for line in applied.stdout.splitlines()) == [
            "podmonitor.monitoring.coreos.com/monitoring-e2e-tandem-frontends",
            "podmonitor.monitoring.coreos.com/monitoring-e2e-tandem-workers",
            "prometheusrule.monitoring.coreos.com/monitoring-e2e-tandem",
            "servicemonitor.monitoring.coreos.com/monitoring-e2e-tandem-operator",
        ]
    finally:
        k8s_cluster.kubectl("delete", "--wait=false", "-f", str(CRDS))
