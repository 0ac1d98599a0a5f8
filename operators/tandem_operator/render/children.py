"""Render every child of an InferenceCluster: pure ``render_*(cr, ...) -> dict | list``.

No client, clock or environment here: the same spec always renders the same objects, so
reconcile is idempotent by construction and everything is testable without a cluster.
What the renderer needs from the cluster (the pools' current size and uid, for owner
references) is passed in by the controller.

Object tree (all names derived from the cluster name ``C``)::

    InferenceCluster C
    ├── ConfigMap C-config          frontend.json, prefill.json, decode.json
    ├── Secret C-credentials        the cluster's CA bundle + member certificate
    │                               (applied by the controller: credentials.py)
    ├── Secret C-mpi-ssh            pools launching an MPI world only: the SSH keys
    │                               (applied by the controller: mpi_keys.py)
    ├── Secret C-ray-token          pools launching Ray groups only: Ray's token
    │                               (applied by the controller: ray_token.py)
    ├── NetworkPolicy C-workers     workers accept only the cluster's own pods
    ├── NetworkPolicy C-frontend    API port from anywhere, metrics port from the operator
    ├── ComputeDomain C-nvlink      GB200 only: IMEX channel for whole-tray workers
    ├── Deployment C-frontend       + Service C-frontend (the endpoint)
    ├── ServiceAccount C-frontend   + Role/RoleBinding: watch the pools' EndpointSlices
    ├── WorkerPool C-prefill        (/scale target)
    │   ├── Deployment C-prefill    (LeaderWorkerSet when nodesPerWorker > 1)
    │   ├── Service C-prefill       headless; its EndpointSlices list the ready workers
    │   └── PodDisruptionBudget C-prefill
    └── WorkerPool C-decode         (same children)
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from tandem.api.v1alpha1 import API_VERSION, InferenceCluster, PoolRole
from tandem.worker.ray_launch import RayPorts
from tandem_operator import names
from tandem_operator.render.access import render_frontend_access
from tandem_operator.render.contract import (
    config_hash,
    dump_config,
    pool_spec,
    render_frontend_config,
    render_worker_config,
)
from tandem_operator.render.credentials import CredentialState, render_credentials_secret
from tandem_operator.render.mpi_keys import MpiKeyState, render_mpi_keys_secret
from tandem_operator.render.multinode import (
    SUBDOMAIN_POLICY,
    launches_ray_group,
    render_group_templates,
)
from tandem_operator.render.network_policy import (
    render_frontend_network_policy,
    render_worker_network_policy,
)
from tandem_operator.render.placement import render_compute_domain
from tandem_operator.render.pods import (
    RenderSettings,
    render_frontend_pod_template,
    render_worker_pod_template,
)
from tandem_operator.render.profiles import get_profile, render_worker_hardware, uses_channel_claim
from tandem_operator.render.ray_token import render_ray_token_secret

Manifest = dict[str, Any]

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
# Labels the LeaderWorkerSet controller puts on every pod of a group.
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


@dataclass(frozen=True, slots=True)
class PoolHandle:
    """What the pool's children need from the live WorkerPool: owner identity and size."""

    name: str
    uid: str
    replicas: int


def owner_reference(api_version: str, kind: str, name: str, uid: str) -> Manifest:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _cluster_owner(cr: InferenceCluster) -> Manifest:
    return owner_reference(API_VERSION, "InferenceCluster", cr.metadata.name, cr.metadata.uid or "")


def _meta(cr: InferenceCluster, name: str, labels: dict[str, str], owner: Manifest) -> Manifest:
    return {
        "name": name,
        "namespace": cr.metadata.namespace or "default",
        "labels": labels,
        "ownerReferences": [owner],
    }


def stamp_applied_hash(obj: Manifest) -> Manifest:
    """Annotate ``obj`` with a hash of itself: a changed hash on the live object means the
    desired state changed (including fields we stopped applying), so it must be applied."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    meta = dict(obj["metadata"])
    meta["annotations"] = {**meta.get("annotations", {}), names.ANNOTATION_APPLIED_HASH: digest}
    return {**obj, "metadata": meta}


# --------------------------------------------------------------------- cluster-level


def render_config_text(cr: InferenceCluster, component: str) -> str:
    """The config document of one component (frontend, prefill, decode), canonical JSON."""
    if component == names.FRONTEND:
        return dump_config(render_frontend_config(cr))
    return dump_config(render_worker_config(cr, PoolRole(component)))


def render_config_texts(cr: InferenceCluster) -> dict[str, str]:
    """Component name -> its config document."""
    return {c: render_config_text(cr, c) for c in (names.FRONTEND, *(r.value for r in PoolRole))}


def render_config_map(cr: InferenceCluster) -> Manifest:
    texts = render_config_texts(cr)
    cluster = cr.metadata.name
    return stamp_applied_hash(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(
                cr,
                names.config_map_name(cluster),
                names.cluster_labels(cluster),
                _cluster_owner(cr),
            ),
            "data": {names.config_key(component): text for component, text in texts.items()},
        }
    )


def render_frontend(cr: InferenceCluster, settings: RenderSettings) -> list[Manifest]:
    """The frontend Deployment, its Service (the cluster's endpoint) and its API access."""
    cluster = cr.metadata.name
    name = names.frontend_name(cluster)
    labels = names.standard_labels(cluster, names.FRONTEND)
    selector = names.selector_labels(cluster, names.FRONTEND)
    digest = config_hash(render_config_text(cr, names.FRONTEND))
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(cr, name, labels, _cluster_owner(cr)),
        "spec": {
            "replicas": cr.spec.frontend.replicas,
            "selector": {"matchLabels": selector},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "revisionHistoryLimit": 3,
            "template": render_frontend_pod_template(cr, settings, digest),
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(cr, name, labels, _cluster_owner(cr)),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [
                {
                    "name": "http",
                    "port": cr.spec.frontend.port,
                    "targetPort": "http",
                    "protocol": "TCP",
                }
            ],
        },
    }
    access = render_frontend_access(_meta(cr, name, labels, _cluster_owner(cr)))
    return [stamp_applied_hash(o) for o in (*access, deployment, service)]


def render_worker_pool(cr: InferenceCluster, role: PoolRole, *, include_replicas: bool) -> Manifest:
    """The WorkerPool of ``role``.

    ``include_replicas`` is False once autoscaling owns the pool's size: server-side apply
    then leaves ``spec.replicas`` to whoever writes /scale (HPA, KEDA, the autoscaler).
    """
    cluster = cr.metadata.name
    pool = pool_spec(cr, role)
    spec: Manifest = {
        "clusterName": cluster,
        "role": role.value,
        "minReplicas": pool.min_replicas,
        "maxReplicas": pool.max_replicas,
    }
    if include_replicas:
        spec["replicas"] = pool.replicas
    return stamp_applied_hash(
        {
            "apiVersion": API_VERSION,
            "kind": "WorkerPool",
            "metadata": _meta(
                cr,
                names.pool_name(cluster, role),
                names.standard_labels(cluster, role.value),
                _cluster_owner(cr),
            ),
            "spec": spec,
        }
    )


def render_compute_domains(cr: InferenceCluster, settings: RenderSettings) -> list[Manifest]:
    """The cluster's ComputeDomain, when a pool's workers claim its IMEX channel."""
    profile = get_profile(cr.spec.accelerator.profile)
    claimed = any(
        uses_channel_claim(profile, pool_spec(cr, r), cr.metadata.name, settings.hardware)
        for r in PoolRole
    )
    return [stamp_applied_hash(render_compute_domain(cr, _cluster_owner(cr)))] if claimed else []


def render_network_policy(cr: InferenceCluster, settings: RenderSettings) -> Manifest:
    cluster = cr.metadata.name
    meta = _meta(
        cr, names.network_policy_name(cluster), names.cluster_labels(cluster), _cluster_owner(cr)
    )
    ray_roles = [role.value for role in PoolRole if launches_ray_group(cr, role)]
    return stamp_applied_hash(
        render_worker_network_policy(
            meta, cluster, settings.worker_metrics_from, ray_roles, RayPorts().block
        )
    )


def render_frontend_policy(cr: InferenceCluster, settings: RenderSettings) -> Manifest:
    cluster = cr.metadata.name
    meta = _meta(
        cr,
        names.frontend_network_policy_name(cluster),
        names.cluster_labels(cluster),
        _cluster_owner(cr),
    )
    return stamp_applied_hash(
        render_frontend_network_policy(
            meta,
            cluster,
            cr.spec.frontend.port,
            settings.worker_metrics_from,
            settings.operator_peer,
        )
    )


def render_credentials(cr: InferenceCluster, state: CredentialState) -> Manifest:
    """The cluster's credentials Secret holding ``state`` (see ``credentials.py``)."""
    name = names.credentials_secret_name(cr.metadata.name)
    return render_credentials_secret(_cluster_secret_meta(cr, name), state)


def render_mpi_keys(cr: InferenceCluster, state: MpiKeyState) -> Manifest:
    """The cluster's MPI SSH key Secret holding ``state`` (see ``mpi_keys.py``)."""
    name = names.mpi_ssh_secret_name(cr.metadata.name)
    return render_mpi_keys_secret(_cluster_secret_meta(cr, name), state)


def render_ray_token(cr: InferenceCluster, token: bytes) -> Manifest:
    """The cluster's Ray token Secret (see ``ray_token.py``)."""
    name = names.ray_token_secret_name(cr.metadata.name)
    return render_ray_token_secret(_cluster_secret_meta(cr, name), token)


def _cluster_secret_meta(cr: InferenceCluster, name: str) -> Manifest:
    """The metadata of a Secret the cluster owns (its labels, owned by the cluster)."""
    return _meta(cr, name, names.cluster_labels(cr.metadata.name), _cluster_owner(cr))


def render_cluster_children(
    cr: InferenceCluster, settings: RenderSettings, *, include_pool_replicas: bool
) -> list[Manifest]:
    """Everything owned directly by the InferenceCluster (but its Secrets, which depend on
    what the live ones hold: see ``credentials.py`` and ``mpi_keys.py``)."""
    return [
        render_config_map(cr),
        render_network_policy(cr, settings),
        render_frontend_policy(cr, settings),
        *render_compute_domains(cr, settings),
        *render_frontend(cr, settings),
        *(render_worker_pool(cr, r, include_replicas=include_pool_replicas) for r in PoolRole),
    ]


# --------------------------------------------------------------------- pool-level


def uses_leader_worker_set(cr: InferenceCluster, role: PoolRole) -> bool:
    return pool_spec(cr, role).nodes_per_worker > 1


def pool_selector(cr: InferenceCluster, role: PoolRole) -> dict[str, str]:
    """Pods the pool's Service, PDB and /scale selector address (LWS: group leaders)."""
    selector = names.selector_labels(cr.metadata.name, role.value)
    if uses_leader_worker_set(cr, role):
        selector[LWS_WORKER_INDEX_LABEL] = "0"
    return selector


def _render_workload(
    cr: InferenceCluster, role: PoolRole, pool: PoolHandle, settings: RenderSettings
) -> Manifest:
    cluster = cr.metadata.name
    spec = pool_spec(cr, role)
    labels = names.standard_labels(cluster, role.value)
    owner = owner_reference(API_VERSION, "WorkerPool", pool.name, pool.uid)
    digest = config_hash(render_config_text(cr, role.value))
    template = render_worker_pod_template(cr, role, settings, digest)
    hardware = render_worker_hardware(cr.spec.accelerator.profile, spec, cr.spec.kv_transfer)
    if uses_leader_worker_set(cr, role):
        group: Manifest = {
            "size": spec.nodes_per_worker,
            # A TP group that lost one member cannot serve: restart it whole.
            "restartPolicy": "RecreateGroupOnPodRestart",
            "workerTemplate": template,
        }
        leader, follower = render_group_templates(cr, role, template)
        group |= {"leaderTemplate": leader, "workerTemplate": follower}
        return {
            "apiVersion": LWS_API_VERSION,
            "kind": "LeaderWorkerSet",
            "metadata": _meta(cr, pool.name, labels, owner),
            "spec": {
                "replicas": pool.replicas,
                "startupPolicy": "LeaderCreated",
                "rolloutStrategy": {
                    "type": "RollingUpdate",
                    "rollingUpdateConfiguration": {
                        "maxSurge": hardware.max_surge,
                        "maxUnavailable": max(1, hardware.max_unavailable),
                    },
                },
                # One headless Service per group, publishing pods before they are ready,
                # so that the group's members resolve each other while the MPI world
                # starts; the pool's own Service (same name as the LWS) stays the
                # router's view of ready leaders.
                "networkConfig": {"subdomainPolicy": SUBDOMAIN_POLICY},
                "leaderWorkerTemplate": group,
            },
        }
    gpu = get_profile(cr.spec.accelerator.profile).has_gpus
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(cr, pool.name, labels, owner),
        "spec": {
            "replicas": pool.replicas,
            "selector": {"matchLabels": names.selector_labels(cluster, role.value)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {
                    "maxSurge": hardware.max_surge,
                    "maxUnavailable": hardware.max_unavailable,
                },
            },
            "revisionHistoryLimit": 3,
            # Loading large weights takes minutes; only then is a rollout "stuck".
            "progressDeadlineSeconds": 1800 if gpu else 600,
            "template": template,
        },
    }


def render_pool_children(
    cr: InferenceCluster, role: PoolRole, pool: PoolHandle, settings: RenderSettings
) -> list[Manifest]:
    """A pool's workload (Deployment or LeaderWorkerSet), headless Service and PDB."""
    cluster = cr.metadata.name
    labels = names.standard_labels(cluster, role.value)
    owner = owner_reference(API_VERSION, "WorkerPool", pool.name, pool.uid)
    selector = pool_selector(cr, role)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(cr, pool.name, labels, owner),
        "spec": {
            "clusterIP": "None",
            "selector": selector,
            # publishNotReadyAddresses stays false: the router only resolves ready workers.
            "ports": [
                {
                    "name": names.WORKER_GRPC_PORT_NAME,
                    "port": names.WORKER_GRPC_PORT,
                    "targetPort": names.WORKER_GRPC_PORT_NAME,
                },
                {"name": "http", "port": names.WORKER_HTTP_PORT, "targetPort": "http"},
            ],
        },
    }
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(cr, pool.name, labels, owner),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector},
            # Evicting a worker that never became ready costs nothing; do not block drains.
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }
    return [
        stamp_applied_hash(_render_workload(cr, role, pool, settings)),
        stamp_applied_hash(service),
        stamp_applied_hash(pdb),
    ]


def render_deletion_cost_patch(cost: int) -> Manifest:
    """Merge patch for a pod the autoscaler wants removed first (lower cost goes first)."""
    return {"metadata": {"annotations": {names.ANNOTATION_DELETION_COST: str(cost)}}}
