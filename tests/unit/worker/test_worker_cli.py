"""The worker's command line against what the operator and local runtime render."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tandem.api.v1alpha1 import PoolRole
from tandem.api.validate import load_inference_cluster
from tandem.worker.contract import ContractError, read_contract
from tandem.worker.main import build_parser, load_contract, resolve_config
from tandem.worker.types import Role
from tandem_operator.contract import render_worker_config, worker_command

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
    argv = [*command[3:]]
    argv[argv.index("--config") + 1] = str(config_file)

    args = build_parser().parse_args(argv)
    env = {"POD_NAME": f"{cr.metadata.name}-{role.value}-7d9f", "POD_IP": "10.0.0.7"}
    config = resolve_config(args, load_contract(args.config), env)

    assert config.role is Role(role.value)
    assert config.worker_id == env["POD_NAME"]
    assert config.public_host == env["POD_IP"]
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
