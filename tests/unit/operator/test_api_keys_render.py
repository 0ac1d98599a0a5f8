"""API keys, tenants and the metrics port in what the operator renders for the frontend:
the key Secrets' volumes, the contract document's apiKeys/tenancy/metricsPort (read back
by the frontend's own model), and the config hash that rolls the pods on a change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tandem.api.v1alpha1 import InferenceCluster
from tandem.api.validate import load_inference_cluster
from tandem.frontend.config import FrontendConfig, TenantLimits
from tandem.frontend.config import render_frontend_config as render_local_config
from tandem_operator.render.children import render_cluster_children, render_config_text
from tandem_operator.render.contract import render_frontend_config
from tandem_operator.render.pods import RenderSettings

REPO = Path(__file__).resolve().parents[3]


def cluster(**frontend: Any) -> InferenceCluster:
    cr = load_inference_cluster(REPO / "manifests" / "examples" / "reference-cpu.yaml")
    wire = cr.to_wire()
    wire["spec"]["frontend"] = {**wire["spec"]["frontend"], **frontend}
    return InferenceCluster.model_validate(wire)


def frontend_pod(cr: InferenceCluster) -> dict[str, Any]:
    children = render_cluster_children(cr, RenderSettings(), include_pool_replicas=True)
    (deployment,) = [
        c
        for c in children
        if c["kind"] == "Deployment" and c["metadata"]["name"].endswith("-frontend")
    ]
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def test_the_clusters_own_key_secret_comes_first_then_the_named_ones() -> None:
    spec = frontend_pod(cluster(apiKeys={"secrets": ["platform-keys", "team-b.keys"]}))
    volumes = [v for v in spec["volumes"] if v["name"].startswith("api-keys-")]
    assert volumes == [
        {
            "name": f"api-keys-{i}",
            # Whole-Secret volumes (no subPath): the kubelet refreshes them in place.
            "secret": {"secretName": name, "optional": True, "defaultMode": 0o440},
        }
        for i, name in enumerate(["reference-api-keys", "platform-keys", "team-b.keys"])
    ]
    (container,) = spec["containers"]
    mounts = [m for m in container["volumeMounts"] if m["name"].startswith("api-keys-")]
    assert mounts == [
        {"name": f"api-keys-{i}", "mountPath": f"/var/run/tandem/api-keys/{i}", "readOnly": True}
        for i in range(3)
    ]
    assert all("subPath" not in m for m in container["volumeMounts"])
    assert {"name": "metrics", "containerPort": 9091, "protocol": "TCP"} in container["ports"]


def test_the_document_names_the_mounted_key_directories_and_the_metrics_port() -> None:
    doc = render_frontend_config(cluster(apiKeys={"secrets": ["platform-keys"]}))
    assert doc["apiKeys"] == {
        "required": True,
        "directories": ["/var/run/tandem/api-keys/0", "/var/run/tandem/api-keys/1"],
    }
    assert doc["metricsPort"] == 9091
    parsed = FrontendConfig.model_validate(doc)  # what the frontend reads
    assert parsed.api_keys is not None and parsed.api_keys.required
    assert parsed.api_keys.directories == doc["apiKeys"]["directories"]
    assert parsed.metrics_port == 9091


def test_keyless_on_purpose_is_said_explicitly_and_mounts_nothing() -> None:
    cr = cluster(apiKeys={"required": False, "secrets": ["platform-keys"]})
    assert render_frontend_config(cr)["apiKeys"] == {"required": False}
    parsed = FrontendConfig.model_validate(render_frontend_config(cr))
    assert parsed.api_keys is not None and not parsed.api_keys.required
    spec = frontend_pod(cr)
    assert not [v for v in spec["volumes"] if v["name"].startswith("api-keys-")]


def test_the_tenants_limits_reach_the_document() -> None:
    cr = cluster(
        tenants=[
            {"name": "team-a", "weight": 4, "maxInFlightRequests": 8},
            {"name": "team-b", "tokensPerMinute": 60000},
        ],
        tenantDefaults={"weight": 1, "maxInFlightRequests": 2},
    )
    tenancy = render_frontend_config(cr)["frontend"]["tenancy"]
    assert tenancy == {
        "defaults": {"weight": 1, "maxInFlightRequests": 2},
        "tenants": {
            "team-a": {"weight": 4, "maxInFlightRequests": 8},
            "team-b": {"weight": 1, "tokensPerMinute": 60000},
        },
    }
    parsed = FrontendConfig.model_validate(render_frontend_config(cr)).frontend.tenancy
    assert parsed.tenants["team-b"] == TenantLimits(tokens_per_minute=60000)
    assert parsed.defaults == TenantLimits(max_in_flight_requests=2)


def test_keys_tenants_roll_the_frontend_but_the_local_document_stays_keyless() -> None:
    base = render_config_text(cluster(), "frontend")
    for changed in (
        cluster(apiKeys={"secrets": ["platform-keys"]}),
        cluster(apiKeys={"required": False}),
        cluster(tenants=[{"name": "team-a", "weight": 2}]),
        cluster(tenantDefaults={"tokensPerMinute": 1000}),
    ):
        assert render_config_text(changed, "frontend") != base
    # `tandem up` renders the same document shape, keyless on loopback, /metrics on its port.
    local = render_local_config(cluster(), {"prefill": "127.0.0.1:1", "decode": "127.0.0.1:2"})
    assert "apiKeys" not in local and "metricsPort" not in local
