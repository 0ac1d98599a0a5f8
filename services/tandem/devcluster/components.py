"""Command lines of the five control-plane components (pure: paths and ports in, argv out).

Everything listens on 127.0.0.1 only. Simulated nodes and pods get loopback addresses, so
nothing that dials one can leave the machine: kwok hands out pod IPs from 127.32.0.0/16 and
gives every node it manages the InternalIP 127.0.0.1 and, as kubelet port, its own server
port. `kubectl logs/exec/port-forward` to a simulated pod thus makes the API server dial
kwok on 127.0.0.1, which answers itself (no logs, no exec: no container exists). The API
refuses loopback addresses in EndpointSlices, so no Service ever lists a simulated pod as
an endpoint. A real node (profile ``real``) is reached by its Hostname address,
``localhost``. Never dial a simulated pod.
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.devcluster.binaries import ClusterBinaries
from tandem.devcluster.layout import StateLayout
from tandem.devcluster.pki import KubeletPki, Pki

HOST = "127.0.0.1"
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "127.32.0.0/16"
NODE_IP = HOST
# Hostname first: the real kubelet (named localhost) listens on 127.0.0.1 only, and its
# InternalIP is its pod bridge; simulated nodes have only the InternalIP 127.0.0.1.
KUBELET_ADDRESS_TYPES = "Hostname,InternalIP"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# The node lifecycle controller marks a node NotReady when its Lease is older than its
# grace period; kwok renews leases only when this is set (kwokctl uses 40s as well).
NODE_LEASE_DURATION_S = 40
KWOK_NODE_SELECTOR = "kwok.x-k8s.io/node=fake"

# No KwokConfiguration document on purpose: kwok applies its option defaults (lease and
# stage parallelism, ...) only when the config has none, and a partial one leaves them 0.
# Options are passed as flags instead.
KWOK_CONFIG_HEADER = "# kwok --config for the Tandem dev cluster: the Stage objects only.\n"


@dataclass(frozen=True, slots=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int

    @property
    def api_url(self) -> str:
        return f"https://{HOST}:{self.apiserver}"

    @property
    def etcd_url(self) -> str:
        return f"http://{HOST}:{self.etcd_client}"


@dataclass(frozen=True, slots=True)
class Component:
    """One process to run and the URL that answers 200 once it is healthy."""

    name: str
    argv: tuple[str, ...]
    health_url: str


# Label a simulated node with this to make it report Ready=False, as when its kubelet
# stops (fault tests); remove the label and kwok's node-initialize stage makes it Ready.
NOT_READY_LABEL = "tandem.dev/simulate"
NOT_READY_VALUE = "not-ready"
# Tandem's own Stage (kwok's Stage API, kwok.x-k8s.io/v1alpha1). It matches whatever the
# node's Ready says, so node-initialize (which matches Ready != True) cannot win it back:
# stages matching the same node are chosen by weight, and node-initialize has none.
NOT_READY_STAGE = f"""---
# Tandem: a node labelled {NOT_READY_LABEL}={NOT_READY_VALUE} stops being Ready.
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: tandem-node-not-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.metadata.labels["{NOT_READY_LABEL}"]'
      operator: 'In'
      values: ['{NOT_READY_VALUE}']
  weight: 1000
  delay:
    durationMilliseconds: 1000
  next:
    statusTemplate: |
      conditions:
      - type: Ready
        status: "False"
        reason: KubeletNotReady
        message: "simulated: label {NOT_READY_LABEL}={NOT_READY_VALUE}"
        lastHeartbeatTime: {{{{ Now | Quote }}}}
        lastTransitionTime: {{{{ Now | Quote }}}}
"""


# And back: once the label is gone, a node that was initialized before (it has addresses)
# gets its Ready condition back and keeps the rest of its status. kwok v0.8.0's own
# node-initialize would match it too and, for a node with an InternalIP but no Hostname
# address (ours: a Hostname would be dialled first), rewrite `addresses` to null. A
# weighted stage wins over node-initialize, which has none; new nodes have no addresses
# yet and still get node-initialize.
RECOVER_STAGE = f"""---
# Tandem: a node whose {NOT_READY_LABEL} label was removed is Ready again, addresses kept.
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: tandem-node-recover
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values: ['True']
    - key: '.status.addresses'
      operator: 'Exists'
    - key: '.metadata.labels["{NOT_READY_LABEL}"]'
      operator: 'DoesNotExist'
  weight: 1
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      conditions:
      {{{{ range NodeConditions }}}}
      - lastHeartbeatTime: {{{{ $now | Quote }}}}
        lastTransitionTime: {{{{ $now | Quote }}}}
        message: {{{{ .message | Quote }}}}
        reason: {{{{ .reason | Quote }}}}
        status: {{{{ .status | Quote }}}}
        type: {{{{ .type | Quote }}}}
      {{{{ end }}}}
"""


def render_kwok_config(stages_yaml: str) -> str:
    """kwok's --config: the Stage documents (kwok refuses to start without them), with
    Tandem's own node-not-ready and node-recover stages last."""
    return KWOK_CONFIG_HEADER + stages_yaml.rstrip("\n") + "\n" + NOT_READY_STAGE + RECOVER_STAGE


def render_components(
    bins: ClusterBinaries,
    layout: StateLayout,
    pki: Pki,
    ports: Ports,
    kubelet_pki: KubeletPki | None = None,
) -> tuple[Component, ...]:
    """The components in start order; stop them in reverse. ``kubelet_pki`` when the
    cluster has a real node: the apiserver then authenticates to its kubelet and checks
    the kubelet's certificate."""
    kubeconfig = str(layout.kubeconfig)
    # The controller manager and scheduler serve /healthz over TLS with a self-signed
    # certificate. They get no --authentication/authorization-kubeconfig: /healthz is
    # always allowed, and delegated authentication would poll for a front-proxy CA bundle
    # this cluster does not have, logging an error each time.
    controller_flags = (
        f"--kubeconfig={kubeconfig}",
        "--leader-elect=false",
        f"--bind-address={HOST}",
        # The default client limit (20 QPS) makes the controller-manager, not the code
        # under test, the bottleneck when a test creates hundreds of pods at once.
        "--kube-api-qps=100",
        "--kube-api-burst=200",
    )
    etcd = Component(
        name="etcd",
        argv=(
            str(bins.path("etcd")),
            "--name=devcluster",
            f"--data-dir={layout.etcd_dir}",
            f"--listen-client-urls={ports.etcd_url}",
            f"--advertise-client-urls={ports.etcd_url}",
            f"--listen-peer-urls=http://{HOST}:{ports.etcd_peer}",
            f"--initial-advertise-peer-urls=http://{HOST}:{ports.etcd_peer}",
            f"--initial-cluster=devcluster=http://{HOST}:{ports.etcd_peer}",
            # Throwaway data: fsync only slows tests down.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ),
        health_url=f"{ports.etcd_url}/health",
    )
    apiserver = Component(
        name="kube-apiserver",
        argv=(
            str(bins.path("kube-apiserver")),
            f"--etcd-servers={ports.etcd_url}",
            f"--bind-address={HOST}",
            f"--advertise-address={HOST}",
            f"--secure-port={ports.apiserver}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--cert-dir={layout.pki_dir / 'apiserver'}",
            # No real endpoints exist for the `kubernetes` Service; do not publish 127.0.0.1.
            "--endpoint-reconciler-type=none",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki.service_account_key}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            f"--token-auth-file={layout.token_file}",
            # Node: a kubelet may touch only its own node and the pods bound to it.
            "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            "--profiling=false",
            f"--kubelet-preferred-address-types={KUBELET_ADDRESS_TYPES}",
            *_kubelet_client_flags(pki, kubelet_pki),
        ),
        health_url=f"{ports.api_url}/readyz",
    )
    controller_manager = Component(
        name="kube-controller-manager",
        argv=(
            str(bins.path("kube-controller-manager")),
            *controller_flags,
            f"--secure-port={ports.controller_manager}",
            f"--cert-dir={layout.pki_dir / 'kube-controller-manager'}",
            f"--service-account-private-key-file={pki.service_account_key}",
            f"--root-ca-file={pki.ca_cert}",
            "--cluster-name=tandem-dev",
            "--profiling=false",
        ),
        health_url=f"https://{HOST}:{ports.controller_manager}/healthz",
    )
    scheduler = Component(
        name="kube-scheduler",
        argv=(
            str(bins.path("kube-scheduler")),
            *controller_flags,
            f"--secure-port={ports.scheduler}",
            f"--cert-dir={layout.pki_dir / 'kube-scheduler'}",
            "--profiling=false",
        ),
        health_url=f"https://{HOST}:{ports.scheduler}/healthz",
    )
    kwok = Component(
        name="kwok",
        argv=(
            str(bins.path("kwok")),
            f"--kubeconfig={kubeconfig}",
            f"--config={layout.kwok_config}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_SELECTOR}",
            f"--cidr={POD_CIDR}",
            f"--node-ip={NODE_IP}",
            # The kubelet port its nodes report: kwok's own server (see the docstring).
            f"--node-port={ports.kwok}",
            f"--node-lease-duration-seconds={NODE_LEASE_DURATION_S}",
            f"--server-address={HOST}:{ports.kwok}",
            *_kwok_tls_flags(kubelet_pki),
        ),
        health_url=f"http://{HOST}:{ports.kwok}/healthz",
    )
    return (etcd, apiserver, controller_manager, scheduler, kwok)


def _kwok_tls_flags(kubelet_pki: KubeletPki | None) -> tuple[str, ...]:
    if kubelet_pki is None:
        return ()  # kwok makes itself a certificate, which the apiserver then does not check
    return (
        f"--tls-cert-file={kubelet_pki.kwok_cert}",
        f"--tls-private-key-file={kubelet_pki.kwok_key}",
    )


def _kubelet_client_flags(pki: Pki, kubelet_pki: KubeletPki | None) -> tuple[str, ...]:
    if kubelet_pki is None:
        return ()
    return (
        f"--kubelet-client-certificate={kubelet_pki.client_cert}",
        f"--kubelet-client-key={kubelet_pki.client_key}",
        f"--kubelet-certificate-authority={pki.ca_cert}",
    )
