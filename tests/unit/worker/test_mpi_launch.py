"""The multi-node launcher's decisions (pure): group host names, the mpirun command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.worker.mpi_launch import (
    build_mpirun_argv,
    compute_group_hosts,
    forwarded_env,
    render_sshd_config,
)


def test_group_hosts_follow_the_unique_per_replica_subdomains() -> None:
    hosts = compute_group_hosts("llm-decode-1.llm-decode-1.inference", 3)
    assert hosts == [
        "llm-decode-1.llm-decode-1.inference",
        "llm-decode-1-1.llm-decode-1.inference",
        "llm-decode-1-2.llm-decode-1.inference",
    ]
    assert compute_group_hosts("a-0.a-0.ns", 1) == ["a-0.a-0.ns"]


@pytest.mark.parametrize(("address", "size"), [("leader-only", 2), ("a.b", 2), ("a.b.ns", 0)])
def test_malformed_group_settings_are_refused(address: str, size: int) -> None:
    with pytest.raises(ValueError):
        compute_group_hosts(address, size)


def test_mpirun_starts_one_rank_per_gpu_and_rank_zero_runs_the_worker() -> None:
    argv = build_mpirun_argv(
        ["l.l.ns", "l-1.l.ns"],
        4,
        ["python", "-m", "tandem.worker", "--role", "decode"],
        ssh_port=2222,
        identity="/root/.ssh/id_ed25519",
        env_names=["NCCL_IB_HCA", "UCX_TLS"],
    )
    assert argv[:5] == ["mpirun", "--allow-run-as-root", "-np", "8", "-H"]
    assert argv[5] == "l.l.ns:4,l-1.l.ns:4"  # the leader host first: rank 0 runs here
    ssh = argv[argv.index("plm_rsh_args") + 1]
    assert "-p 2222" in ssh and "-i /root/.ssh/id_ed25519" in ssh
    assert argv[argv.index("NCCL_IB_HCA") - 1] == "-x"
    tail = argv[argv.index("trtllm-llmapi-launch") :]
    assert tail == ["trtllm-llmapi-launch", "python", "-m", "tandem.worker", "--role", "decode"]


def test_only_the_fabric_and_runtime_environment_is_forwarded() -> None:
    environ = {
        "UCX_TLS": "rc",
        "NCCL_DEBUG": "WARN",
        "PATH": "/usr/bin",
        "POD_IP": "10.0.0.1",  # the leader's own address: never pushed to other ranks
        "HF_TOKEN": "x",
        "SECRET_THING": "y",
    }
    assert forwarded_env(environ) == ["HF_TOKEN", "NCCL_DEBUG", "PATH", "UCX_TLS"]


def test_sshd_accepts_keys_only_on_the_given_port(tmp_path: Path) -> None:
    config = render_sshd_config(2222, tmp_path, Path("/etc/tandem/ssh"))
    assert "Port 2222" in config
    assert "PasswordAuthentication no" in config
    # The mounted file itself, which a key rotation updates in place.
    assert "AuthorizedKeysFile /etc/tandem/ssh/authorized_keys" in config
