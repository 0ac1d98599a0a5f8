"""NVLink-domain placement on GB200 NVL72 (pure): affinity, ComputeDomains, and the check.

**Where pods go.** An NVL72 rack is one NVLink domain of 18 compute trays (4 GPUs each);
GPU feature discovery labels every tray with its clique, ``nvidia.com/gpu.clique`` =
``<cluster uuid>.<clique id>``. KV moving inside a domain rides NVLink (~1 ms for a
32k-token gpt-oss-120b prompt) instead of RDMA, so a cluster's prefill and decode pods
*prefer* one domain: a preferred pod-affinity term on that label, keyed to the cluster's
worker pods. Preferred, not required: a cluster larger than a rack still schedules (and
the status says it is split, see ``compute_nvlink_placement``). Pools whose workers use
part of a tray also prefer trays their own pool already uses, so whole trays stay free
for the pools that need them (a 4-GPU decode worker cannot use three half-filled trays).

**Multi-node NVLink.** GPUs of different trays reach each other over NVLink only through
an IMEX channel, which NVIDIA's DRA driver for GPUs hands out through a ComputeDomain
(``resource.nvidia.com/v1beta1``; CRD
``deployments/helm/nvidia-dra-driver-gpu/crds/resource.nvidia.com_computedomains.yaml``
in github.com/NVIDIA/k8s-dra-driver-gpu): the driver's controller creates the
ResourceClaimTemplate named in ``spec.channel.resourceClaimTemplate.name``, and each pod
lists it under ``spec.resourceClaims`` (``resourceClaimTemplateName``) with the container
naming the claim in ``resources.claims`` (the driver's ``nvbandwidth`` and IMEX demo
specs do exactly this). ``numNodes: 0`` because the driver's default
(``IMEXDaemonsWithDNSNames``) recommends it: pods are released as soon as their node's
IMEX daemon runs. The spec is immutable (its CRD validates ``self == oldSelf``), so it is
rendered from names only.

Only pods that hold *whole trays* get the channel claim: the driver prepares one channel
claim per node and ComputeDomain (channel 0 of the node; several pods of one
ComputeDomain on a node are not supported yet, kubernetes-sigs/dra-driver-nvidia-gpu
issue 309), so a claim on 1-GPU prefill pods would let only one of them per tray start.
Their KV reaches decode workers over RDMA instead; give prefill workers whole trays to
keep it on NVLink.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tandem.api.v1alpha1 import InferenceCluster, PoolRole
from tandem_operator import names

Manifest = dict[str, Any]

# GPU feature discovery's NVLink clique label (GB200: one clique per NVL72 rack).
NVLINK_DOMAIN_LABEL = "nvidia.com/gpu.clique"
HOSTNAME_LABEL = "kubernetes.io/hostname"
COMPUTE_DOMAIN_API_VERSION = "resource.nvidia.com/v1beta1"
COMPUTE_DOMAIN_KIND = "ComputeDomain"
CHANNEL_CLAIM = "compute-domain-channel"
SAME_DOMAIN_WEIGHT = 100
SAME_NODE_WEIGHT = 50


def compute_domain_name(cluster: str) -> str:
    return f"{cluster}-nvlink"


def channel_template_name(cluster: str) -> str:
    """The ResourceClaimTemplate the DRA driver creates for the cluster's ComputeDomain."""
    return f"{cluster}-nvlink-channel"


def _workers_of(cluster: str, roles: Iterable[str]) -> Manifest:
    return {
        "matchLabels": {names.LABEL_CLUSTER: cluster},
        "matchExpressions": [
            {"key": names.LABEL_ROLE, "operator": "In", "values": sorted(roles)},
        ],
    }


def render_nvlink_pod_affinity(cluster: str, role: PoolRole, *, packs_nodes: bool) -> Manifest:
    """``podAffinity`` keeping a cluster's workers in one NVLink domain (preferred)."""
    terms: list[Manifest] = [
        {
            "weight": SAME_DOMAIN_WEIGHT,
            "podAffinityTerm": {
                "labelSelector": _workers_of(cluster, (r.value for r in PoolRole)),
                "topologyKey": NVLINK_DOMAIN_LABEL,
            },
        }
    ]
    if packs_nodes:
        terms.append(
            {
                "weight": SAME_NODE_WEIGHT,
                "podAffinityTerm": {
                    "labelSelector": _workers_of(cluster, (role.value,)),
                    "topologyKey": HOSTNAME_LABEL,
                },
            }
        )
    return {"preferredDuringSchedulingIgnoredDuringExecution": terms}


def render_channel_claim(cluster: str) -> tuple[Manifest, Manifest]:
    """The pod's ``resourceClaims`` entry and the container's ``resources.claims`` entry."""
    pod = {"name": CHANNEL_CLAIM, "resourceClaimTemplateName": channel_template_name(cluster)}
    return pod, {"name": CHANNEL_CLAIM}


def render_compute_domain(cr: InferenceCluster, owner: Manifest) -> Manifest:
    cluster = cr.metadata.name
    return {
        "apiVersion": COMPUTE_DOMAIN_API_VERSION,
        "kind": COMPUTE_DOMAIN_KIND,
        "metadata": {
            "name": compute_domain_name(cluster),
            "namespace": cr.metadata.namespace or "default",
            "labels": names.cluster_labels(cluster),
            "ownerReferences": [owner],
        },
        "spec": {
            "numNodes": 0,
            "channel": {"resourceClaimTemplate": {"name": channel_template_name(cluster)}},
        },
    }


# ----------------------------------------------------------------------------- status


@dataclass(frozen=True, slots=True)
class NvlinkPlacement:
    """Which NVLink domains a cluster's scheduled worker pods occupy."""

    pods_by_domain: Mapping[str, int]
    # Scheduled on a node without the clique label (or whose Node is not known).
    outside: int = 0

    @property
    def split(self) -> bool:
        return len(self.pods_by_domain) + (1 if self.outside else 0) > 1

    @property
    def scheduled(self) -> int:
        return sum(self.pods_by_domain.values()) + self.outside

    def describe(self) -> str:
        parts = [f"{n} in {_short(d)}" for d, n in sorted(self.pods_by_domain.items())]
        if self.outside:
            parts.append(f"{self.outside} outside any NVLink domain")
        return ", ".join(parts)


def compute_nvlink_placement(
    pod_nodes: Iterable[str], node_domains: Mapping[str, str]
) -> NvlinkPlacement:
    """``pod_nodes``: the node of each scheduled worker pod; ``node_domains``: node ->
    its ``nvidia.com/gpu.clique``."""
    domains: Counter[str] = Counter()
    outside = 0
    for node in pod_nodes:
        domain = node_domains.get(node)
        if domain:
            domains[domain] += 1
        else:
            outside += 1
    return NvlinkPlacement(dict(domains), outside)


def _short(domain: str) -> str:
    """``<cluster uuid>.<clique>`` -> ``clique <uuid prefix>.<clique>`` (readable)."""
    head, _, clique = domain.rpartition(".")
    return f"clique {head[:8]}.{clique}" if head else f"clique {domain}"
