"""The LeaderWorkerSet controller of the dev cluster (``--with-lws``): where its build is,
its command line and configuration, its identity and the webhook configurations that point
the API server at it (pure: paths, ports and file contents in, argv and objects out).

tests/lws/build-lws.sh builds the controller (sigs.k8s.io/lws/cmd) and copies the CRDs,
ClusterRole and webhook configurations of the same release next to it.

The controller runs as a host process on 127.0.0.1, like the rest of the control plane,
with its webhooks on: LWS's defaulting webhook fills in fields the controller relies on
(the restart policy, the rollout strategy, the subdomain policy), and its pod webhook
labels every pod of a group with its worker index and gives every container the leader's
address and the group size (LWS_LEADER_ADDRESS, LWS_GROUP_SIZE), which multi-node
launchers read. Without them a LeaderWorkerSet behaves unlike one on a
real cluster. The API server reaches the webhooks by ``url`` (there is no in-cluster
Service to name), over TLS with a certificate the dev cluster's CA issues; the controller's
own certificate rotation (which writes a Secret for a Service) is therefore off.

It runs as its own user, bound to the ClusterRole LWS ships (config/rbac/role.yaml), not
as cluster-admin. Leader election is off (one replica), so the leader-election Role is
not needed; the metrics endpoint is off (it would need TokenReview rights and nothing
scrapes it here).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tandem.devcluster.binaries import find_bin_dir
from tandem.devcluster.components import HOST, Component

CONTROLLER = "lws-controller"
# The user the controller authenticates as (a line of --token-auth-file), in no group: it
# holds only what the ClusterRoleBinding of :func:`render_role_binding` grants.
USER = "tandem:lws-controller"
# Both CRDs must be served before the controller starts: it watches DisaggregatedSets too,
# and its manager fails when a watched kind is not served. By name: 2.8 MB of YAML that
# kubectl reads itself (PyYAML takes seconds over it).
CRD_FILES = {
    "leaderworkersets.leaderworkerset.x-k8s.io": (
        "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"
    ),
    "disaggregatedsets.disaggregatedset.x-k8s.io": (
        "config/crd/bases/disaggregatedset.x-k8s.io_disaggregatedsets.yaml"
    ),
}
ROLE_FILE = "config/rbac/role.yaml"
WEBHOOKS_FILE = "config/webhook/manifests.yaml"
# Upstream's kustomize patches and the kind each targets (config/webhook/kustomization.yaml):
# they limit the pod webhooks to pods with the LWS label, so that no other pod of the
# cluster depends on the controller being up.
WEBHOOK_PATCH_FILES = {
    "MutatingWebhookConfiguration": "config/webhook/mutating-patch.yaml",
    "ValidatingWebhookConfiguration": "config/webhook/validating-patch.yaml",
}
HEALTH_PATH = "/readyz"

Json = dict[str, Any]


class LwsBuildMissingError(RuntimeError):
    """tests/lws/build-lws.sh has not been run (or failed); the message says how to run it."""


@dataclass(frozen=True, slots=True)
class LwsBuild:
    """The outputs of tests/lws/build-lws.sh."""

    bin_dir: Path

    @property
    def controller(self) -> Path:
        return self.bin_dir / CONTROLLER

    @property
    def crds(self) -> dict[str, Path]:
        """The CRD files by CRD name."""
        return {name: self.bin_dir / f for name, f in CRD_FILES.items()}

    @property
    def role(self) -> Path:
        return self.bin_dir / ROLE_FILE

    @property
    def webhooks(self) -> Path:
        return self.bin_dir / WEBHOOKS_FILE

    @property
    def webhook_patches(self) -> dict[str, Path]:
        """Upstream's patch file for each webhook configuration kind."""
        return {kind: self.bin_dir / f for kind, f in WEBHOOK_PATCH_FILES.items()}

    def missing(self) -> list[Path]:
        patches = self.webhook_patches.values()
        wanted = (self.controller, *self.crds.values(), self.role, self.webhooks, *patches)
        return [path for path in wanted if not path.is_file()]


@dataclass(frozen=True, slots=True)
class LwsPorts:
    webhook: int
    health: int

    @property
    def webhook_url(self) -> str:
        return f"https://{HOST}:{self.webhook}"


def locate_lws(bin_dir: Path | None = None) -> LwsBuild:
    """The build in ``bin_dir``, else $TANDEM_LWS_BIN, else tests/lws/bin of the checkout
    this package runs from."""
    bin_dir = bin_dir or find_bin_dir("TANDEM_LWS_BIN", "lws")
    if bin_dir is None:
        raise LwsBuildMissingError(
            "cannot find tests/lws/bin; set TANDEM_LWS_BIN to the directory "
            "tests/lws/build-lws.sh writes"
        )
    build = LwsBuild(bin_dir)
    missing = build.missing()
    if missing:
        raise LwsBuildMissingError(
            f"missing: {', '.join(map(str, missing))}; build the LeaderWorkerSet controller "
            "with `make lws-build` (tests/lws/build-lws.sh), or set TANDEM_LWS_BIN"
        )
    return build


def render_controller_config(ports: LwsPorts, cert_dir: Path) -> str:
    """The controller's --config (LWS's Configuration, config.lws.x-k8s.io/v1alpha1)."""
    config = {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        # The certificate comes from the dev cluster's CA (tls.crt/tls.key in certDir).
        "internalCertManagement": {"enable": False},
        "webhook": {"host": HOST, "port": ports.webhook, "certDir": str(cert_dir)},
        # "0" turns controller-runtime's metrics server off.
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"{HOST}:{ports.health}"},
    }
    return yaml.safe_dump(config, sort_keys=False)


def render_controller(
    build: LwsBuild, config: Path, kubeconfig: Path, ports: LwsPorts
) -> Component:
    return Component(
        name=CONTROLLER,
        argv=(
            str(build.controller),
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            # Upstream defaults to development logging (stack traces on warnings).
            "--zap-devel=false",
        ),
        health_url=f"http://{HOST}:{ports.health}{HEALTH_PATH}",
    )


def render_role_binding(role: Json) -> Json:
    """Bind LWS's own ClusterRole to the controller's user."""
    name = role["metadata"]["name"]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"lws-{name}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
    }


def render_role(role: Json) -> Json:
    """LWS's ClusterRole under a name of our own: ``manager-role`` says nothing in a
    cluster where other controllers' roles live too."""
    return {**role, "metadata": {**role["metadata"], "name": "lws-manager-role"}}


def render_webhook_configurations(
    manifests: str, patches: Mapping[str, str], *, url: str, ca_pem: bytes
) -> list[Json]:
    """LWS's webhook configurations with upstream's patches (by target kind) applied, each
    webhook sent to ``url`` + its path instead of to the in-cluster Service, trusting
    ``ca_pem``, and named ``lws-<upstream name>``."""
    ca_bundle = base64.b64encode(ca_pem).decode()
    rendered = []
    for doc in (d for d in yaml.safe_load_all(manifests) if d):
        webhooks = list(doc["webhooks"])
        for op in yaml.safe_load(patches.get(doc["kind"], "[]")):
            webhooks[_webhook_index(op)] = op["value"]
        for i, webhook in enumerate(webhooks):
            path = webhook["clientConfig"]["service"]["path"]
            webhooks[i] = {
                **webhook,
                "clientConfig": {"url": f"{url}{path}", "caBundle": ca_bundle},
            }
        name = f"lws-{doc['metadata']['name']}"
        rendered.append({**doc, "metadata": {"name": name}, "webhooks": webhooks})
    return rendered


def _webhook_index(op: Json) -> int:
    """The index a JSON patch op ``replace /webhooks/<i>`` names; upstream's patches use no
    other kind, and anything else must fail loudly rather than be half-applied."""
    prefix = "/webhooks/"
    if op.get("op") != "replace" or not str(op.get("path", "")).startswith(prefix):
        raise ValueError(f"unsupported webhook patch operation: {op}")
    return int(op["path"][len(prefix) :])
