"""The worker's command line against what the operator and local runtime render."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tandem.api.v1alpha1 import PoolRole
from tandem.api.validate import load_inference_cluster
from tandem.security import CredentialsError
from tandem.worker.contract import SUPPORTED_CONTRACT_VERSION, ContractError, read_contract
from tandem.worker.main import build_parser, load_contract, open_credentials, resolve_config
from tandem.worker.types import Role
from tandem_operator.render.contract import render_worker_config, worker_command

EXAMPLE = Path(__file__).parents[3] / "manifests" / "examples" / "reference-cpu.yaml"


@pytest.mark.parametrize("role", [PoolRole.PREFILL, PoolRole.DECODE])
def test_the_operators_pod_command_and_document_configure_the_worker(
    role: PoolRole, tmp_path: Path
) -> None:
    cr = load_inference_cluster(EXAMPLE)
    document = render_worker_config(cr, role)
    config_file = tmp_path / "worker.json"
    config_file.write_text(json.dumps(document))
    command = worker_command(role)
    assert command[:3] == ["python", "-m", "tandem.worker"]
    env = {"POD_NAME": f"{cr.metadata.name}-{role.value}-7d9f", "POD_IP": "10.0.0.7"}
    # The kubelet expands $(VAR) from the container's env before the process starts.
    argv = [a.replace("$(POD_IP)", env["POD_IP"]) for a in command[3:]]
    argv[argv.index("--config") + 1] = str(config_file)

    args = build_parser().parse_args(argv)
    config = resolve_config(args, load_contract(args.config), env)

    assert config.role is Role(role.value)
    assert config.worker_id == env["POD_NAME"]
    assert config.public_host == env["POD_IP"]
    # It listens on the pod IP only, with the cluster's credentials; /drain is on a
    # Unix socket in the pod.
    assert config.host == env["POD_IP"]
    assert str(config.credentials_dir) == "/var/run/tandem/credentials"
    assert str(config.admin_socket) == "/tmp/tandem-admin.sock"
    assert config.engine == cr.spec.engine.kind.value
    assert config.kv_backend == cr.spec.kv_transfer.backend.value
    assert config.kv_transfer_timeout_s == cr.spec.kv_transfer.timeout_seconds
    assert args.http_port is not None
    assert read_contract(document).ucx_transports == tuple(cr.spec.kv_transfer.ucx_transports)


def test_flags_win_over_the_document(tmp_path: Path) -> None:
    document = render_worker_config(load_inference_cluster(EXAMPLE), PoolRole.DECODE)
    config_file = tmp_path / "worker.json"
    config_file.write_text(json.dumps(document))
    args = build_parser().parse_args(
        [
            f"--config={config_file}",
            "--role=both",
            "--worker-id=w",
            "--kv-backend=tcp",
            "--kv-transfer-timeout-s=5",
            '--engine-options={"num_layers": 2}',
        ]
    )
    config = resolve_config(args, load_contract(args.config), {})
    assert (config.role, config.worker_id, config.kv_backend) == (Role.BOTH, "w", "tcp")
    assert config.kv_transfer_timeout_s == 5.0
    assert dict(config.engine_options) == {"num_layers": 2}
    assert config.public_host == "127.0.0.1"


def test_a_role_is_required() -> None:
    with pytest.raises(SystemExit):
        resolve_config(build_parser().parse_args(["--worker-id=w"]), load_contract(None), {})


@pytest.mark.parametrize(
    "document",
    [
        {"contractVersion": 2},
        {"contractVersion": 1, "engine": []},
        {"contractVersion": 1, "engine": {"options": "fast"}},
        {"contractVersion": 1, "kvTransfer": {"ucxTransports": "tcp"}},
        {"contractVersion": 1, "role": 3},
    ],
)
def test_unusable_documents_are_rejected(document: dict[str, object]) -> None:
    with pytest.raises(ContractError):
        read_contract(document)


def test_a_config_from_a_newer_operator_stops_the_worker_in_one_line(tmp_path: Path) -> None:
    cr = load_inference_cluster(EXAMPLE)
    document = render_worker_config(cr, PoolRole.DECODE)
    document["contractVersion"] = SUPPORTED_CONTRACT_VERSION + 1
    config_file = tmp_path / "decode.json"
    config_file.write_text(json.dumps(document))
    result = subprocess.run(
        [sys.executable, "-m", "tandem.worker", f"--config={config_file}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"cannot use worker config {config_file}: worker config contractVersion "
        f"{SUPPORTED_CONTRACT_VERSION + 1} is newer than this worker reads "
        f"({SUPPORTED_CONTRACT_VERSION}): run a worker image as new as the operator "
        "(docs/operator.md, Upgrading)"
    ]


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.7"])
def test_without_credentials_a_worker_listens_on_loopback_only(host: str) -> None:
    args = build_parser().parse_args(["--role=both", f"--host={host}", "--kv-backend=tcp"])
    config = resolve_config(args, load_contract(None), {})
    with pytest.raises(CredentialsError, match="pass --credentials DIR"):
        open_credentials(config)
    loopback = build_parser().parse_args(["--role=both", "--kv-backend=tcp"])
    assert open_credentials(resolve_config(loopback, load_contract(None), {})) is None


def test_unusable_credentials_stop_the_worker_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("not a certificate")
    (tmp_path / "tls.crt").write_text("")
    (tmp_path / "tls.key").write_text("")
    result = subprocess.run(
        [sys.executable, "-m", "tandem.worker", "--role=both", f"--credentials={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"worker {socket.gethostname()} cannot start: credentials in {tmp_path}: "
        "ca.crt holds no PEM certificate"
    )
