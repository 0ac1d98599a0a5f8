"""``tandem operator run``'s command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.cli import operator as operator_cli
from tandem.cli.main import build_parser


def test_operator_run_flags() -> None:
    args = build_parser().parse_args(
        [
            "operator",
            "run",
            "--kubeconfig",
            "/tmp/kc",
            "--namespace",
            "serving",
            "--metrics-port",
            "9100",
            "--leader-election-namespace",
            "tandem-system",
        ]
    )
    assert args.handler is operator_cli.cmd_operator_run
    assert (args.kubeconfig, args.namespace, args.metrics_port) == ("/tmp/kc", "serving", 9100)
    assert args.leader_election_namespace == "tandem-system"
    assert args.workers == 8


def test_lease_namespace_defaults_to_the_pods_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    assert operator_cli._default_lease_namespace() == "ops"
    monkeypatch.delenv("POD_NAMESPACE")
    monkeypatch.setattr(operator_cli, "SA_NAMESPACE_FILE", Path("/nonexistent"))
    assert operator_cli._default_lease_namespace() == operator_cli.DEFAULT_NAMESPACE
