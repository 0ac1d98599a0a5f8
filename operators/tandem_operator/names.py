"""Deterministic names, labels and annotations of everything the operator creates.

Names are derived from the InferenceCluster's name only, so a restarted operator (or a
second replica) computes exactly the same objects: idempotence by construction.
"""

from __future__ import annotations

# FRONTEND_METRICS_PORT: the frontend's /metrics, apart from its API port (the API
# refuses it as spec.frontend.port).
from tandem.api.v1alpha1 import FRONTEND_METRICS_PORT as FRONTEND_METRICS_PORT
from tandem.api.v1alpha1 import PoolRole

FIELD_MANAGER = "tandem-operator"
# Under autoscaling the pool size must survive the operator no longer applying
# ``spec.replicas``; this second manager keeps (co-)owning the field so server-side apply
# never drops it back to the CRD default. HPA/KEDA/the autoscaler take it over on write.
REPLICAS_FIELD_MANAGER = "tandem-operator-replicas"

MANAGED_BY = "tandem-operator"

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
# Selector labels: stable for the life of an object (Deployment selectors are immutable).
LABEL_CLUSTER = "tandem.dev/cluster"
LABEL_ROLE = "tandem.dev/role"  # frontend | prefill | decode

ANNOTATION_CONFIG_HASH = "tandem.dev/config-hash"  # on pod templates: pods roll on change
ANNOTATION_APPLIED_HASH = "tandem.dev/applied-hash"  # on objects: what we last applied
ANNOTATION_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
# On an InferenceCluster: a new value asks for new credentials (credentials.py).
ANNOTATION_ROTATE_CREDENTIALS = "tandem.dev/rotate-credentials"
# On its credentials Secret: the rotation phase, since when, and the request it answers.
ANNOTATION_CREDENTIALS_PHASE = "tandem.dev/credentials-phase"
ANNOTATION_CREDENTIALS_SINCE = "tandem.dev/credentials-phase-since"
ANNOTATION_CREDENTIALS_ROTATION = "tandem.dev/credentials-rotation"
# The same three for the MPI SSH keys of clusters whose workers span nodes (mpi_keys.py).
ANNOTATION_ROTATE_MPI_KEYS = "tandem.dev/rotate-mpi-keys"
ANNOTATION_MPI_KEYS_PHASE = "tandem.dev/mpi-keys-phase"
ANNOTATION_MPI_KEYS_SINCE = "tandem.dev/mpi-keys-phase-since"
ANNOTATION_MPI_KEYS_ROTATION = "tandem.dev/mpi-keys-rotation"
# On the profiling Job and the perf-table ConfigMap: what was profiled (profiling.py).
ANNOTATION_PROFILE_DIGEST = "tandem.dev/profile-digest"
# On the perf-table ConfigMap when the profile failed: why, in one line.
ANNOTATION_PROFILE_FAILURE = "tandem.dev/profile-failure"
# On the profiling pod: the InferenceCluster it measures, projected as the file
# `tandem profile -f` reads (the downward API; no ConfigMap to keep in step).
ANNOTATION_PROFILED_CLUSTER = "tandem.dev/profiled-cluster"

FRONTEND = "frontend"
PROFILE = "profile"  # the profiling Job's component and role label
PERF_TABLE_KEY = "table.json"

# Ports of the data-plane contract (see pods.py).
WORKER_GRPC_PORT = 50051
WORKER_HTTP_PORT = 9090
WORKER_GRPC_PORT_NAME = "grpc"
FRONTEND_METRICS_PORT_NAME = "metrics"  # FRONTEND_METRICS_PORT's name on the container

CONFIG_MOUNT_PATH = "/etc/tandem"
CREDENTIALS_MOUNT_PATH = "/var/run/tandem/credentials"
# The frontend's API key Secrets, one directory each: <root>/0 is <cluster>-api-keys,
# then spec.frontend.apiKeys.secrets in order (not under CONFIG_MOUNT_PATH: a mount
# point inside the read-only ConfigMap volume could not be created).
API_KEYS_MOUNT_ROOT = "/var/run/tandem/api-keys"
# The admin socket (/drain, for the preStop hook) lives in the pod's own /tmp emptyDir.
ADMIN_SOCKET = "/tmp/tandem-admin.sock"


def frontend_name(cluster: str) -> str:
    return f"{cluster}-{FRONTEND}"


def pool_name(cluster: str, role: PoolRole) -> str:
    """The WorkerPool, its workload, headless Service and PDB all share this name."""
    return f"{cluster}-{role.value}"


def config_map_name(cluster: str) -> str:
    return f"{cluster}-config"


def credentials_secret_name(cluster: str) -> str:
    return f"{cluster}-credentials"


def mpi_ssh_secret_name(cluster: str) -> str:
    return f"{cluster}-mpi-ssh"


def ray_token_secret_name(cluster: str) -> str:
    return f"{cluster}-ray-token"


def frontend_network_policy_name(cluster: str) -> str:
    return f"{cluster}-{FRONTEND}"


def profile_job_name(cluster: str) -> str:
    return f"{cluster}-{PROFILE}"


def perf_table_name(cluster: str) -> str:
    """The ConfigMap holding the step-time table the profiling Job measured."""
    return f"{cluster}-perf-table"


def network_policy_name(cluster: str) -> str:
    return f"{cluster}-workers"


def config_key(component: str) -> str:
    """ConfigMap key read by one component (``frontend``, ``prefill``, ``decode``)."""
    return f"{component}.json"


def selector_labels(cluster: str, component: str) -> dict[str, str]:
    """The immutable selector of a component's pods."""
    return {LABEL_CLUSTER: cluster, LABEL_ROLE: component}


def standard_labels(cluster: str, component: str) -> dict[str, str]:
    """Labels on every object and pod: app.kubernetes.io/* plus the selector labels."""
    return {
        LABEL_NAME: "tandem",
        LABEL_INSTANCE: cluster,
        LABEL_COMPONENT: "frontend" if component == FRONTEND else "worker",
        LABEL_PART_OF: "tandem",
        LABEL_MANAGED_BY: MANAGED_BY,
        **selector_labels(cluster, component),
    }


def cluster_labels(cluster: str) -> dict[str, str]:
    """Labels of objects that belong to the whole cluster (the ConfigMap)."""
    return {
        LABEL_NAME: "tandem",
        LABEL_INSTANCE: cluster,
        LABEL_PART_OF: "tandem",
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_CLUSTER: cluster,
    }


def label_selector(labels: dict[str, str]) -> str:
    """``k=v,k=v`` in a stable order, as /scale's ``status.selector`` wants it."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def endpoint(cluster: str, namespace: str, port: int) -> str:
    return f"http://{frontend_name(cluster)}.{namespace}.svc:{port}"


def worker_address(cluster: str, namespace: str, role: PoolRole) -> str:
    """Where the frontend finds a pool's ready workers: the EndpointSlices of the pool's
    Service, port ``grpc`` (``tandem.router.endpoint_slices``)."""
    return f"kubernetes:///{pool_name(cluster, role)}.{namespace}:{WORKER_GRPC_PORT_NAME}"
