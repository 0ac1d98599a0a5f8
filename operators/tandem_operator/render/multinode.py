"""Pod templates of workers that span nodes (``nodesPerWorker > 1``): a LeaderWorkerSet
group per worker, launched under Ray (the default) or as one MPI world (pure).

**Ray** (``launcher: ray``): each group is a Ray cluster of its own. The leader pod runs
``python -m tandem.worker.ray_launch leader -- <worker command>``: it starts the Ray head,
waits for every pod of the group to join, and execs the worker, which places its other
ranks on the other nodes (the reference engine's tensor-parallel ranks; TensorRT-LLM's,
with ``orchestrator_type: ray`` in its LLM arguments). The other pods run ``ray_launch
follower``: they join the head and are ready once their node manager listens. Ray
authenticates with the token of the Secret ``<cluster>-ray-token`` (``ray_token.py``),
which every pod of the group mounts; no dashboard runs; every Ray port lies in one block
(``RayPorts``), which the NetworkPolicy opens to the pool's own pods only.

**MPI** (``launcher: mpi``, TensorRT-LLM only). TensorRT-LLM 1.2.1 runs a TP/EP group
across nodes as one MPI world started with ``mpirun -H host:slots,...
trtllm-llmapi-launch <command>`` (its multi-node docs and
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

from tandem.api.v1alpha1 import InferenceCluster, MultiNodeLauncher, PoolRole
from tandem.worker.mpi_launch import AUTHORIZED_KEYS, PRIVATE_KEY
from tandem.worker.ray_launch import TOKEN_PATH_ENV, RayPorts
from tandem_operator import names
from tandem_operator.render.contract import pool_spec, worker_command
from tandem_operator.render.profiles import get_profile, gpus_per_worker
from tandem_operator.render.ray_token import TOKEN_KEY

Manifest = dict[str, Any]

SSH_PORT = 2222
SSH_KEYS_MOUNT = "/etc/tandem/ssh"
SSH_VOLUME = "mpi-ssh"
LAUNCH_MODULE = "tandem.worker.mpi_launch"
RAY_LAUNCH_MODULE = "tandem.worker.ray_launch"
RAY_TOKEN_MOUNT = "/etc/tandem/ray"
RAY_TOKEN_VOLUME = "ray-token"
SUBDOMAIN_POLICY = "UniquePerReplica"


def launches_mpi_world(cr: InferenceCluster, role: PoolRole) -> bool:
    return pool_spec(cr, role).group_launcher is MultiNodeLauncher.MPI


def launches_ray_group(cr: InferenceCluster, role: PoolRole) -> bool:
    return pool_spec(cr, role).group_launcher is MultiNodeLauncher.RAY


def render_group_templates(
    cr: InferenceCluster, role: PoolRole, template: Manifest
) -> tuple[Manifest, Manifest]:
    """(leader, follower) pod templates derived from the pool's worker ``template``."""
    if launches_ray_group(cr, role):
        return _render_ray_templates(cr, role, template)
    return _render_mpi_templates(cr, role, template)


def _render_ray_templates(
    cr: InferenceCluster, role: PoolRole, template: Manifest
) -> tuple[Manifest, Manifest]:
    leader, follower = copy.deepcopy(template), copy.deepcopy(template)
    launch = ["python", "-m", RAY_LAUNCH_MODULE]
    leader["spec"]["containers"][0]["command"] = [*launch, "leader", "--", *worker_command(role)]
    container = follower["spec"]["containers"][0]
    container["command"] = [*launch, "follower"]
    container["ports"] = [
        {"name": "ray-node", "containerPort": RayPorts().node_manager, "protocol": "TCP"}
    ]
    _replace_probes(container, "ray-node")
    secret = names.ray_token_secret_name(cr.metadata.name)
    for part in (leader, follower):  # every node of the group presents the token
        _mount_secret_item(part, RAY_TOKEN_VOLUME, secret, TOKEN_KEY, RAY_TOKEN_MOUNT)
        _add_env(part["spec"]["containers"][0], {TOKEN_PATH_ENV: f"{RAY_TOKEN_MOUNT}/{TOKEN_KEY}"})
    return leader, follower


def _render_mpi_templates(
    cr: InferenceCluster, role: PoolRole, template: Manifest
) -> tuple[Manifest, Manifest]:
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
    _mount_secret_item(leader, SSH_VOLUME, secret, PRIVATE_KEY, SSH_KEYS_MOUNT)

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
    _replace_probes(container, "ssh")
    _mount_secret_item(follower, SSH_VOLUME, secret, AUTHORIZED_KEYS, SSH_KEYS_MOUNT)
    return leader, follower


def _replace_probes(container: Manifest, port: str) -> None:
    """A follower runs no worker: ready once ``port`` listens, nothing to drain."""
    for probe in ("startupProbe", "livenessProbe", "lifecycle"):
        container.pop(probe, None)
    container["readinessProbe"] = {
        "tcpSocket": {"port": port},
        "periodSeconds": 10,
        "failureThreshold": 3,
    }


def _mount_secret_item(
    template: Manifest, volume: str, secret: str, item: str, mount_path: str
) -> None:
    """Mount the one ``item`` of ``secret`` the pod's part needs (a volume, not a subPath:
    Kubernetes updates it in place during a rotation)."""
    spec = template["spec"]
    source = {
        "secretName": secret,
        "items": [{"key": item, "path": item}],
        "defaultMode": 0o400,
    }
    spec["volumes"] = [*spec.get("volumes", []), {"name": volume, "secret": source}]
    container = spec["containers"][0]
    container["volumeMounts"] = [
        *container.get("volumeMounts", []),
        {"name": volume, "mountPath": mount_path, "readOnly": True},
    ]


def _add_env(container: Manifest, values: dict[str, str]) -> None:
    container["env"] = [
        *container.get("env", []),
        *({"name": name, "value": value} for name, value in values.items()),
    ]
