"""The workers' and frontends' NetworkPolicies (pure: tandem_operator.render.network_policy)."""

from __future__ import annotations

from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]

from tandem_operator.render.children import render_cluster_children
from tandem_operator.render.network_policy import (
    operator_peer,
    render_frontend_network_policy,
    render_worker_network_policy,
)
from tandem_operator.render.pods import RenderSettings

from .test_render import load

META = {"name": "reference-workers", "namespace": "serving"}
PROMETHEUS = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}


def test_workers_accept_only_their_own_clusters_frontend_and_workers() -> None:
    policy = render_worker_network_policy(META, "reference")
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    assert spec["podSelector"]["matchLabels"] == {"tandem.dev/cluster": "reference"}
    assert spec["podSelector"]["matchExpressions"][0]["values"] == ["prefill", "decode"]
    (rule,) = spec["ingress"]
    (peer,) = rule["from"]
    # Same namespace (no namespaceSelector), same cluster, frontend or worker: all ports,
    # since UCX picks its ports at run time.
    assert set(peer) == {"podSelector"}
    assert peer["podSelector"]["matchLabels"] == {"tandem.dev/cluster": "reference"}
    assert peer["podSelector"]["matchExpressions"][0]["values"] == ["frontend", "prefill", "decode"]
    assert "ports" not in rule
    kubernetes_validate.validate(policy, "1.36", strict=True)


def _admits(policy: dict[str, Any], role: str, port: int, protocol: str = "TCP") -> bool:
    """Whether ``policy`` lets a pod of this cluster with ``role`` reach ``port`` (the
    rules' semantics: any rule whose peers and ports both match)."""
    labels = {"tandem.dev/cluster": "reference", "tandem.dev/role": role}

    def selects(selector: dict[str, Any]) -> bool:
        if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
            return False
        return all(
            labels.get(e["key"]) in e["values"] for e in selector.get("matchExpressions", [])
        )

    def opens(entry: dict[str, Any]) -> bool:
        if entry.get("protocol", "TCP") != protocol:
            return False
        if "port" not in entry:
            return True
        return entry["port"] <= port <= entry.get("endPort", entry["port"])

    return any(
        any(selects(peer["podSelector"]) for peer in rule["from"] if "podSelector" in peer)
        and ("ports" not in rule or any(opens(entry) for entry in rule["ports"]))
        for rule in policy["spec"]["ingress"]
    )


def test_ray_ports_are_open_to_the_ray_pools_pods_only() -> None:
    block = range(20000, 20200)
    policy = render_worker_network_policy(META, "reference", (), ["decode"], block)
    kubernetes_validate.validate(policy, "1.36", strict=True)
    for port in (1, 8000, 19999, 20200, 45123, 65535):
        assert all(_admits(policy, role, port) for role in ("frontend", "prefill", "decode"))
    for port in (20000, 20001, 20008, 20150, 20199):
        assert _admits(policy, "decode", port)
        assert not _admits(policy, "frontend", port) and not _admits(policy, "prefill", port)
    assert _admits(policy, "frontend", 53, "UDP")  # UDP as before: no Ray port is UDP
    # Without Ray groups, nothing changes: every port from the cluster's pods.
    plain = render_worker_network_policy(META, "reference")
    assert all(_admits(plain, "frontend", port) for port in (20000, 20199))


def test_a_cluster_with_a_ray_pool_closes_its_ray_ports_to_others() -> None:
    cr = load(
        "reference-cpu.yaml",
        decode={"nodesPerWorker": 2, "tensorParallelSize": 2},
        prefill={"replicas": 0, "minReplicas": 0, "maxReplicas": 0},
    )
    children = render_cluster_children(cr, RenderSettings(), include_pool_replicas=True)
    workers = next(c for c in children if c["metadata"]["name"] == "reference-workers")
    assert _admits(workers, "decode", 20000) and not _admits(workers, "frontend", 20000)


def test_metrics_scrapers_get_the_side_port_only_and_only_when_named() -> None:
    policy = render_worker_network_policy(META, "reference", [PROMETHEUS])
    _, scrape = policy["spec"]["ingress"]
    assert scrape == {"from": [PROMETHEUS], "ports": [{"protocol": "TCP", "port": 9090}]}
    # Never a rule with an empty "from": that would admit every source.
    for metrics_from in ((), []):
        rules = render_worker_network_policy(META, "reference", metrics_from)["spec"]["ingress"]
        assert all(rule.get("from") for rule in rules)


def test_the_operator_setting_reaches_the_rendered_policy() -> None:
    settings = RenderSettings(worker_metrics_from=(PROMETHEUS,))
    children = render_cluster_children(
        load("reference-cpu.yaml"), settings, include_pool_replicas=True
    )
    workers, frontends = [c for c in children if c["kind"] == "NetworkPolicy"]
    assert workers["metadata"]["name"] == "reference-workers"
    assert workers["spec"]["ingress"][1]["from"] == [PROMETHEUS]
    assert frontends["metadata"]["name"] == "reference-frontend"
    assert frontends["spec"]["ingress"][1]["from"] == [PROMETHEUS]


def test_frontends_take_the_api_from_anywhere_and_metrics_from_the_scrapers_only() -> None:
    operator = operator_peer("tandem-system")
    assert operator == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tandem-system"}},
        "podSelector": {
            "matchLabels": {
                "app.kubernetes.io/name": "tandem",
                "app.kubernetes.io/component": "operator",
            }
        },
    }
    meta = {"name": "reference-frontend", "namespace": "serving"}
    policy = render_frontend_network_policy(meta, "reference", 8000, [PROMETHEUS], operator)
    spec = policy["spec"]
    assert spec["podSelector"] == {
        "matchLabels": {"tandem.dev/cluster": "reference", "tandem.dev/role": "frontend"}
    }
    api, metrics = spec["ingress"]
    assert api == {"ports": [{"protocol": "TCP", "port": 8000}]}  # keys protect it
    assert metrics == {
        "from": [operator, PROMETHEUS],
        "ports": [{"protocol": "TCP", "port": 9091}],
    }
    kubernetes_validate.validate(policy, "1.36", strict=True)
    # No scraper named (the operator outside the cluster): the metrics port stays shut.
    (only,) = render_frontend_network_policy(meta, "reference", 8000)["spec"]["ingress"]
    assert only == api


def test_the_operators_namespace_reaches_the_frontends_policy() -> None:
    settings = RenderSettings(operator_peer=operator_peer("ops"))
    children = render_cluster_children(
        load("reference-cpu.yaml"), settings, include_pool_replicas=True
    )
    (policy,) = [c for c in children if c["metadata"]["name"] == "reference-frontend"
                 and c["kind"] == "NetworkPolicy"]  # fmt: skip
    assert policy["spec"]["ingress"][1]["from"] == [operator_peer("ops")]
