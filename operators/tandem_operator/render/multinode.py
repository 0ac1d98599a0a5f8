"""Pod templates of workers that span nodes (``nodesPerWorker > 1``): a LeaderWorkerSet group
per worker, launched as one MPI world (pure).

TensorRT-LLM 1.2.1 runs a TP/EP group across nodes as one MPI world started with
``mpirun -H host:slots,... trtllm-llmapi-launch <command>`` (its multi-node docs and
``tensorrt_llm/llmapi/trtllm-llmapi-launch``): rank 0 runs the command, which drives the
other ranks. So in each group:

* the **leader** pod runs ``python -m tandem.worker.mpi_launch leader`` — it waits for the
  followers' DNS names and execs mpirun with one slot per GPU per node, the worker
  command behind ``trtllm-llmapi-launch``; it is the pod the router talks to (gRPC,
  probes, drain as any worker);
* each **follower** pod runs ``python -m tandem.worker.mpi_launch follower`` — an SSH
  daemon mpirun starts its ranks through; ready when SSH listens.

mpirun logs in with the key pair of the Secret ``<cluster>-mpi-ssh``, which the operator
generates and rotates (``mpi_keys.py``): leaders mount its private key only, followers
its ``authorized_keys`` only. Followers find each other through the LeaderWorkerSet's
per-group headless Service (``UniquePerReplica`` subdomains), which publishes pods before
they are ready; the pool's own Service keeps routing to ready leaders only.
"""

from __future__ import annotations

import copy
from typing import Any

from tandem.api.v1alpha1 import EngineKind, InferenceCluster, PoolRole
from tandem.worker.mpi_launch import AUTHORIZED_KEYS, PRIVATE_KEY
from tandem_operator import names
from tandem_operator.render.contract import pool_spec, worker_command
from tandem_operator.render.profiles import get_profile, gpus_per_worker

Manifest = dict[str, Any]

SSH_PORT = 2222
SSH_KEYS_MOUNT = "/etc/tandem/ssh"
SSH_VOLUME = "mpi-ssh"
LAUNCH_MODULE = "tandem.worker.mpi_launch"
SUBDOMAIN_POLICY = "UniquePerReplica"


def launches_mpi_world(cr: InferenceCluster, role: PoolRole) -> bool:
    """Multi-node TensorRT-LLM workers need the MPI launcher (the reference engine never
    spans nodes: its groups run plain workers)."""
    return cr.spec.engine.kind is EngineKind.TRTLLM and pool_spec(cr, role).nodes_per_worker > 1


def render_group_templates(
    cr: InferenceCluster, role: PoolRole, template: Manifest
) -> tuple[Manifest, Manifest]:
    """(leader, follower) pod templates derived from the pool's worker ``template``."""
    pool = pool_spec(cr, role)
    gpus = gpus_per_worker(get_profile(cr.spec.accelerator.profile), pool)
    secret = names.mpi_ssh_secret_name(cr.metadata.name)

    leader = copy.deepcopy(template)
    container = leader["spec"]["containers"][0]
    container["command"] = [
        "python",
        "-m",
        LAUNCH_MODULE,
        "leader",
        "--gpus-per-node",
        str(max(gpus, 1)),
        "--ssh-port",
        str(SSH_PORT),
        "--keys",
        SSH_KEYS_MOUNT,
        "--",
        *worker_command(role),
    ]
    _mount_keys(leader, secret, PRIVATE_KEY)

    follower = copy.deepcopy(template)
    container = follower["spec"]["containers"][0]
    container["command"] = [
        "python",
        "-m",
        LAUNCH_MODULE,
        "follower",
        "--ssh-port",
        str(SSH_PORT),
        "--keys",
        SSH_KEYS_MOUNT,
    ]
    container["ports"] = [{"name": "ssh", "containerPort": SSH_PORT, "protocol": "TCP"}]
    for probe in ("startupProbe", "livenessProbe", "lifecycle"):
        container.pop(probe, None)
    container["readinessProbe"] = {
        "tcpSocket": {"port": "ssh"},
        "periodSeconds": 10,
        "failureThreshold": 3,
    }
    _mount_keys(follower, secret, AUTHORIZED_KEYS)
    return leader, follower


def _mount_keys(template: Manifest, secret: str, item: str) -> None:
    """Mount the one ``item`` of the key Secret the pod's part needs (a volume, not a
    subPath: Kubernetes updates it in place during a rotation)."""
    spec = template["spec"]
    volume = {
        "secretName": secret,
        "items": [{"key": item, "path": item}],
        "defaultMode": 0o400,
    }
    spec["volumes"] = [*spec.get("volumes", []), {"name": SSH_VOLUME, "secret": volume}]
    container = spec["containers"][0]
    container["volumeMounts"] = [
        *container.get("volumeMounts", []),
        {"name": SSH_VOLUME, "mountPath": SSH_KEYS_MOUNT, "readOnly": True},
    ]
