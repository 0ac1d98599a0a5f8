"""Start a worker that spans several nodes: one MPI world per LeaderWorkerSet group.

TensorRT-LLM 1.2.1 runs a TP/EP group across nodes as one MPI world launched with
``mpirun ... trtllm-llmapi-launch <command>``: rank 0 runs ``<command>`` (here the Tandem
worker, whose ``tensorrt_llm.LLM`` then drives every rank through the launcher's proxy)
and every other rank runs ``tensorrt_llm.llmapi.mgmn_worker_node``
(``tensorrt_llm/llmapi/trtllm-llmapi-launch``; TensorRT-LLM's multi-node docs and its
trtllm-serve examples launch it the same way, with ``mpirun -H host:slots``).

The operator renders a LeaderWorkerSet whose pods run this module:

* ``follower`` (worker pods): an SSH daemon for mpirun to start ranks through, accepting
  the public keys of the mounted ``authorized_keys`` (from the ``<cluster>-mpi-ssh`` Secret
  the operator generates and rotates); sshd reads that file at every login, so a rotation
  reaches a running follower with no restart;
* ``leader`` (the group's leader pod): waits until every follower resolves, then execs
  ``mpirun`` with one slot per GPU on each node and the worker command behind
  ``trtllm-llmapi-launch``, logging in with the mounted private key ``id_ed25519`` as it
  is when mpirun starts.

Host names follow the LeaderWorkerSet ``UniquePerReplica`` subdomain policy: the leader is
``LWS_LEADER_ADDRESS`` = ``<lws>-<group>.<lws>.<namespace>`` and follower ``i`` is
``<lws>-<group>-<i>.<lws>-<group>.<namespace>`` (a headless Service per group that also
publishes not-ready pods, created by the LWS controller).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

DEFAULT_SSH_PORT = 2222
DEFAULT_KEYS_DIR = "/etc/tandem/ssh"
# The files of the mounted key Secret: the leader's private key, the followers' accepted keys.
PRIVATE_KEY = "id_ed25519"
AUTHORIZED_KEYS = "authorized_keys"
# Environment every rank needs (the transport and NCCL settings the operator rendered).
FORWARDED_PREFIXES = ("UCX_", "NCCL_", "TLLM_", "TRTLLM_", "NIXL_", "CUDA_", "HF_")
FORWARDED_NAMES = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "HOME")
LAUNCHER = "trtllm-llmapi-launch"


def compute_group_hosts(leader_address: str, group_size: int) -> list[str]:
    """The group's hosts, leader first (see the module docstring for the naming)."""
    if group_size < 1:
        raise ValueError(f"LWS_GROUP_SIZE must be >= 1, got {group_size}")
    leader, _, rest = leader_address.partition(".")
    namespace = rest.partition(".")[2]
    if not leader or not namespace:
        raise ValueError(f"LWS_LEADER_ADDRESS {leader_address!r} is not <pod>.<service>.<ns>")
    followers = [f"{leader}-{i}.{leader}.{namespace}" for i in range(1, group_size)]
    return [leader_address, *followers]


def forwarded_env(environ: Mapping[str, str]) -> list[str]:
    return sorted(
        name for name in environ if name.startswith(FORWARDED_PREFIXES) or name in FORWARDED_NAMES
    )


def build_mpirun_argv(
    hosts: Sequence[str],
    slots: int,
    command: Sequence[str],
    *,
    ssh_port: int,
    identity: str,
    env_names: Sequence[str],
) -> list[str]:
    """``mpirun`` starting ``slots`` ranks (one per GPU) on each host, rank 0 here."""
    ssh = f"-p {ssh_port} -i {identity} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
    argv = [
        "mpirun",
        "--allow-run-as-root",  # NVIDIA's release images run as root
        "-np",
        str(len(hosts) * slots),
        "-H",
        ",".join(f"{host}:{slots}" for host in hosts),
        "--mca",
        "plm_rsh_args",
        ssh,
    ]
    for name in env_names:
        argv += ["-x", name]
    return [*argv, LAUNCHER, *command]


def render_sshd_config(port: int, home: Path, keys_dir: Path) -> str:
    ssh = home / ".ssh"
    return "\n".join(
        [
            f"Port {port}",
            f"HostKey {ssh / 'host_ed25519_key'}",
            f"PidFile {ssh / 'sshd.pid'}",
            # The mounted file itself, not a copy: Kubernetes updates it during a rotation.
            f"AuthorizedKeysFile {keys_dir / AUTHORIZED_KEYS}",
            "PasswordAuthentication no",
            "PubkeyAuthentication yes",
            "PermitRootLogin prohibit-password",
            # The key files come from a Secret volume with its own ownership.
            "StrictModes no",
            "",
        ]
    )


def _install_identity(keys_dir: Path, home: Path) -> Path:
    """A private copy of the mounted key (ssh refuses a key others may read)."""
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
    identity = ssh / PRIVATE_KEY
    shutil.copyfile(keys_dir / PRIVATE_KEY, identity)
    identity.chmod(0o600)
    return identity


def _wait_resolvable(hosts: Sequence[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for host in hosts:
        while True:
            try:
                socket.getaddrinfo(host, None)
                break
            except socket.gaierror:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{host} did not resolve within {timeout_s:g} s") from None
                time.sleep(1.0)


def run_leader(args: argparse.Namespace, environ: Mapping[str, str]) -> None:
    hosts = compute_group_hosts(environ["LWS_LEADER_ADDRESS"], int(environ["LWS_GROUP_SIZE"]))
    identity = _install_identity(Path(args.keys), Path(environ.get("HOME", "/root")))
    _wait_resolvable(hosts[1:], args.dns_timeout_s)
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    argv = build_mpirun_argv(
        hosts,
        args.gpus_per_node,
        command,
        ssh_port=args.ssh_port,
        identity=str(identity),
        env_names=forwarded_env(environ),
    )
    print("starting the MPI world:", " ".join(argv), file=sys.stderr, flush=True)
    os.execvp(argv[0], argv)


def run_follower(args: argparse.Namespace, environ: Mapping[str, str]) -> None:
    home = Path(environ.get("HOME", "/root"))
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
    host_key = ssh / "host_ed25519_key"
    if not host_key.exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)],
            check=True,
            timeout=60,
        )
    config = ssh / "sshd_config"
    config.write_text(render_sshd_config(args.ssh_port, home, Path(args.keys)))
    os.execvp("/usr/sbin/sshd", ["/usr/sbin/sshd", "-D", "-e", "-f", str(config)])


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tandem.worker.mpi_launch", description=__doc__)
    sub = p.add_subparsers(dest="part", required=True)
    leader = sub.add_parser("leader", help="exec mpirun for the group (the leader pod)")
    leader.add_argument("--gpus-per-node", type=int, required=True)
    leader.add_argument("--dns-timeout-s", type=float, default=300.0)
    leader.add_argument("command", nargs=argparse.REMAINDER, help="-- the worker command")
    follower = sub.add_parser("follower", help="serve SSH for mpirun (worker pods)")
    for part in (leader, follower):
        part.add_argument("--ssh-port", type=int, default=DEFAULT_SSH_PORT)
        part.add_argument("--keys", default=DEFAULT_KEYS_DIR, help="mounted SSH key Secret")
    args = p.parse_args(argv)
    if args.part == "leader":
        run_leader(args, os.environ)
    else:
        run_follower(args, os.environ)


if __name__ == "__main__":
    main()
