"""Start a worker whose ranks span the pods of a LeaderWorkerSet group, with Ray.

Each pod of the group is one node of a Ray cluster of its own:

* ``leader`` (the group's leader pod): starts the Ray head, waits until every pod of the
  group (``LWS_GROUP_SIZE``) has joined, then execs the worker command with
  ``RAY_ADDRESS`` pointing at the head. The worker places its other ranks on the other
  nodes: the reference engine's follower ranks (``engines.reference.tp``), or
  TensorRT-LLM's with ``orchestrator_type="ray"`` on its ``LLM``. It is the pod the
  router talks to (gRPC, probes, drain as any worker).
* ``follower`` (the other pods): waits for the leader's name to resolve, then joins its
  Ray head and stays in the foreground; ready once its node manager listens.

Security: Ray's token authentication is on (``RAY_AUTH_MODE=token``; the token is the
file ``RAY_AUTH_TOKEN_PATH`` names, from the Secret the operator generates per cluster),
no dashboard is started, and every port Ray opens is pinned in one block (``RayPorts``)
so that a NetworkPolicy admits the group's own pods to it and no one else.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tandem.engines.ray_nodes import RANK_PORT_ENV, wait_for_nodes
from tandem.worker.stop_signals import exit_at_once_on_stop

# Each port Ray opens, by its ``ray start`` flag, as an offset into the group's block:
# those every node opens, then those only the head does.
_NODE_PORTS = (
    ("--node-manager-port", 1),
    ("--object-manager-port", 2),
    ("--dashboard-agent-grpc-port", 4),
    ("--dashboard-agent-listen-port", 5),
    ("--metrics-export-port", 6),
    ("--runtime-env-agent-port", 7),
)
_HEAD_PORTS = (("--port", 0), ("--ray-client-server-port", 3))
_RANK_LINK = 8  # a follower rank's link to the leader (``engines.reference.tp``)
_WORKERS = range(100, 200)  # Ray's worker processes (the rank actors among them)


@dataclass(frozen=True, slots=True)
class RayPorts:
    """Every port a node of the group listens on, in one block from ``first`` (the head's
    GCS port) to ``last``."""

    first: int = 20000

    @property
    def gcs(self) -> int:
        return self.first

    @property
    def node_manager(self) -> int:
        """Listening once the node has joined (a follower pod's readiness)."""
        return self.first + dict(_NODE_PORTS)["--node-manager-port"]

    @property
    def rank_link(self) -> int:
        return self.first + _RANK_LINK

    @property
    def workers(self) -> range:
        return range(self.first + _WORKERS.start, self.first + _WORKERS.stop)

    @property
    def last(self) -> int:
        return self.workers.stop - 1

    @property
    def block(self) -> range:
        return range(self.first, self.last + 1)

    def start_flags(self, *, head: bool) -> list[str]:
        """``ray start``'s port flags for a node, the head's own ones included if ``head``."""
        ports = [*_NODE_PORTS, *(_HEAD_PORTS if head else ())]
        return [
            *(f"{flag}={self.first + offset}" for flag, offset in ports),
            f"--min-worker-port={self.workers.start}",
            f"--max-worker-port={self.last}",
        ]


# Ray's object store carries no tensors here (the ranks' link does): the least Ray takes.
OBJECT_STORE_BYTES = 80 * 2**20
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"


def build_ray_start_argv(
    node_ip: str, ports: RayPorts, *, head: str | None, cpus: int = 1
) -> list[str]:
    """``ray start`` for the head (``head`` None) or a node joining the head at ``head``
    (``host:port``)."""
    argv = [
        sys.executable,  # Ray's CLI of this environment, whatever PATH holds
        "-m",
        "ray.scripts.scripts",
        "start",
        f"--node-ip-address={node_ip}",
        *ports.start_flags(head=head is None),
        f"--object-store-memory={OBJECT_STORE_BYTES}",
        f"--num-cpus={cpus}",
        "--disable-usage-stats",
    ]
    if head is None:
        return [*argv, "--head", "--include-dashboard=false"]
    return [*argv, f"--address={head}", "--block"]


def ray_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment Ray runs in: token authentication on, with the mounted token."""
    if not environ.get(TOKEN_PATH_ENV):
        raise SystemExit(
            f"{TOKEN_PATH_ENV} is not set: Ray runs only with token authentication "
            "(the operator mounts the cluster's token Secret and sets it)"
        )
    return {**environ, "RAY_AUTH_MODE": "token"}


def run_leader(args: argparse.Namespace, environ: Mapping[str, str]) -> None:
    env = ray_environment(environ)
    node_ip, ports = env["POD_IP"], RayPorts(args.ports_from)
    group_size = int(env["LWS_GROUP_SIZE"])
    subprocess.run(build_ray_start_argv(node_ip, ports, head=None), env=env, check=True)
    address = f"{node_ip}:{ports.gcs}"
    _wait_for_group(address, group_size, args.join_timeout_s, env)
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    env |= {"RAY_ADDRESS": address, RANK_PORT_ENV: str(ports.rank_link)}
    print(f"Ray group of {group_size} joined; starting the worker", file=sys.stderr, flush=True)
    os.execvpe(command[0], command, env)


def run_follower(args: argparse.Namespace, environ: Mapping[str, str]) -> None:
    env = ray_environment(environ)
    leader, ports = env["LWS_LEADER_ADDRESS"], RayPorts(args.ports_from)
    gcs = args.leader_gcs_port or ports.gcs
    deadline = time.monotonic() + args.join_timeout_s
    while True:
        try:
            with socket.create_connection((leader, gcs), timeout=2.0):
                break
        except OSError:  # not resolvable yet, or its head not up yet
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"the group's leader {leader} did not start Ray within "
                    f"{args.join_timeout_s:g} s"
                ) from None
            time.sleep(1.0)
    argv = build_ray_start_argv(env["POD_IP"], ports, head=f"{leader}:{gcs}")
    # A child, not exec'd: `ray start --block` has no SIGTERM handler, so as PID 1 it
    # would ignore the kubelet's stop. This process leaves on it (stop_signals), and the
    # container's Ray processes end with its PID 1.
    raise SystemExit(subprocess.run(argv, env=env, check=False).returncode)


def _wait_for_group(address: str, size: int, timeout_s: float, env: Mapping[str, str]) -> None:
    os.environ.update(env)  # the token, for this process's own connection (read on import)
    import ray

    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    try:
        wait_for_nodes(ray, size, timeout_s)
    finally:
        ray.shutdown()


def main(argv: Sequence[str] | None = None) -> None:
    exit_at_once_on_stop()  # the leader's worker, once exec'd, sets its own
    p = argparse.ArgumentParser(prog="python -m tandem.worker.ray_launch", description=__doc__)
    sub = p.add_subparsers(dest="part", required=True)
    leader = sub.add_parser("leader", help="start the Ray head, then the worker (leader pod)")
    leader.add_argument("command", nargs=argparse.REMAINDER, help="-- the worker command")
    follower = sub.add_parser("follower", help="join the leader's Ray head (other pods)")
    follower.add_argument(
        "--leader-gcs-port", type=int, default=0, help="the head's port, if not --ports-from's"
    )
    for part in (leader, follower):
        part.add_argument("--join-timeout-s", type=float, default=300.0)
        part.add_argument(
            "--ports-from",
            type=int,
            default=RayPorts().first,
            help="the first of the ports this node's Ray listens on (a block of 200)",
        )
    args = p.parse_args(argv)
    if args.part == "leader":
        run_leader(args, os.environ)
    else:
        run_follower(args, os.environ)


if __name__ == "__main__":
    main()
