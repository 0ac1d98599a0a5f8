"""The LeaderWorkerSet controller's command line, configuration, identity and webhook
configurations are pure renderings: check what the running cluster depends on."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from tandem.devcluster.lws import (
    USER,
    LwsBuild,
    LwsBuildMissingError,
    LwsPorts,
    locate_lws,
    render_controller,
    render_controller_config,
    render_role,
    render_role_binding,
    render_webhook_configurations,
)

PORTS = LwsPorts(webhook=29443, health=28081)
REPO_BUILD = Path(__file__).resolve().parents[3] / "tests" / "lws" / "bin"

# The shape of upstream's config/webhook/manifests.yaml and its kustomize patch.
MANIFESTS = """
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- name: mleaderworkerset.kb.io
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate-lws}
  rules: [{apiGroups: [leaderworkerset.x-k8s.io], resources: [leaderworkersets]}]
- name: mpod.kb.io
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}
  rules: [{apiGroups: [""], resources: [pods]}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- name: vleaderworkerset.kb.io
  clientConfig:
    service: {name: webhook-service, namespace: system, path: /validate-lws}
"""
MUTATING_PATCH = """
- op: replace
  path: /webhooks/1
  value:
    name: mpod.kb.io
    clientConfig:
      service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}
    objectSelector:
      matchExpressions: [{key: leaderworkerset.sigs.k8s.io/name, operator: Exists}]
    rules: [{apiGroups: [""], resources: [pods]}]
"""


def _render(patches: dict[str, str] | None = None) -> dict[str, dict[str, object]]:
    rendered = render_webhook_configurations(
        MANIFESTS,
        {"MutatingWebhookConfiguration": MUTATING_PATCH} if patches is None else patches,
        url="https://127.0.0.1:29443",
        ca_pem=b"CA PEM",
    )
    return {doc["kind"]: doc for doc in rendered}


def test_every_webhook_is_called_by_url_on_loopback_and_trusts_the_cluster_ca() -> None:
    rendered = _render()
    urls = []
    for doc in rendered.values():
        for webhook in doc["webhooks"]:  # type: ignore[attr-defined]
            client = webhook["clientConfig"]
            assert set(client) == {"url", "caBundle"}  # no Service reference left
            assert base64.b64decode(client["caBundle"]) == b"CA PEM"
            urls.append(client["url"])
    assert urls == [
        "https://127.0.0.1:29443/mutate-lws",
        "https://127.0.0.1:29443/mutate--v1-pod",
        "https://127.0.0.1:29443/validate-lws",
    ]


def test_upstream_patch_limits_the_pod_webhook_to_lws_pods() -> None:
    mutating = _render()["MutatingWebhookConfiguration"]
    pod_webhook = mutating["webhooks"][1]  # type: ignore[index]
    assert pod_webhook["objectSelector"]["matchExpressions"] == [
        {"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}
    ]
    # The webhook the patch does not name is kept as it was.
    assert "objectSelector" not in mutating["webhooks"][0]  # type: ignore[index]


def test_configurations_get_names_of_their_own() -> None:
    names = {kind: doc["metadata"] for kind, doc in _render().items()}
    assert names == {
        "MutatingWebhookConfiguration": {"name": "lws-mutating-webhook-configuration"},
        "ValidatingWebhookConfiguration": {"name": "lws-validating-webhook-configuration"},
    }


def test_an_unsupported_patch_operation_fails_instead_of_being_skipped() -> None:
    patch = "- {op: add, path: /webhooks/-, value: {}}"
    with pytest.raises(ValueError, match="unsupported webhook patch"):
        _render({"MutatingWebhookConfiguration": patch})


def test_controller_config_serves_on_loopback_with_the_given_certificate() -> None:
    config = yaml.safe_load(render_controller_config(PORTS, Path("/state/lws/certs")))
    assert config["apiVersion"] == "config.lws.x-k8s.io/v1alpha1"
    assert config["kind"] == "Configuration"
    assert config["webhook"] == {"host": "127.0.0.1", "port": 29443, "certDir": "/state/lws/certs"}
    assert config["health"] == {"healthProbeBindAddress": "127.0.0.1:28081"}
    assert config["metrics"] == {"bindAddress": "0"}  # off: no listener at all
    # Its own rotation would write a Secret for an in-cluster Service that does not exist.
    assert config["internalCertManagement"] == {"enable": False}
    assert config["leaderElection"] == {"leaderElect": False}


def test_controller_command_line_and_health_url() -> None:
    build = LwsBuild(Path("/bin/lws"))
    component = render_controller(build, Path("/s/config.yaml"), Path("/s/kubeconfig"), PORTS)
    assert component.argv[:3] == (
        "/bin/lws/lws-controller",
        "--config=/s/config.yaml",
        "--kubeconfig=/s/kubeconfig",
    )
    assert component.health_url == "http://127.0.0.1:28081/readyz"


def test_controller_identity_is_a_user_bound_to_the_lws_role_only() -> None:
    role = render_role({"kind": "ClusterRole", "metadata": {"name": "manager-role"}, "rules": []})
    assert role["metadata"]["name"] == "lws-manager-role"
    binding = render_role_binding(role)
    assert binding["roleRef"]["name"] == "lws-manager-role"
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}
    ]


def test_locate_names_every_missing_file_and_the_build_command(tmp_path: Path) -> None:
    (tmp_path / "lws-controller").write_text("")
    with pytest.raises(LwsBuildMissingError) as missing:
        locate_lws(tmp_path)
    assert "leaderworkersets.yaml" in str(missing.value)
    assert "make lws-build" in str(missing.value)


@pytest.mark.skipif(
    not (REPO_BUILD / "lws-controller").is_file(), reason="LWS not built (make lws-build)"
)
def test_upstream_webhooks_render_with_the_pod_webhooks_limited_to_lws_pods() -> None:
    build = locate_lws(REPO_BUILD)
    patches = {kind: path.read_text() for kind, path in build.webhook_patches.items()}
    rendered = render_webhook_configurations(
        build.webhooks.read_text(), patches, url="https://127.0.0.1:1", ca_pem=b"x"
    )
    for doc in rendered:
        for webhook in doc["webhooks"]:
            if webhook["rules"][0]["resources"] == ["pods"]:
                assert webhook["objectSelector"]["matchExpressions"][0]["key"] == (
                    "leaderworkerset.sigs.k8s.io/name"
                )
