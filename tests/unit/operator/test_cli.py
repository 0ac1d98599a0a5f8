"""``tandem operator run``'s command line."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tandem.cli import operator as operator_cli
from tandem.cli.main import build_parser
from tandem.portcheck import PortHolder, PortInUseError
from tandem_operator.manager import default_metrics_host, default_metrics_port

RenderedContainers = Callable[[str, Any], list[dict[str, Any]]]


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
    assert (args.kubeconfig, args.namespace, args.metrics_port) == ("/tmp/kc", ["serving"], 9100)
    assert args.leader_election_namespace == "tandem-system"
    assert args.workers == 8


def test_lease_namespace_defaults_to_the_pods_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    assert operator_cli._default_lease_namespace() == "ops"
    monkeypatch.delenv("POD_NAMESPACE")
    monkeypatch.setattr(operator_cli, "SA_NAMESPACE_FILE", Path("/nonexistent"))
    assert operator_cli._default_lease_namespace() == operator_cli.DEFAULT_NAMESPACE


def test_in_a_cluster_the_frontends_policy_admits_the_operators_own_pods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args = build_parser().parse_args(["operator", "run"])
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert operator_cli.render_settings(args).operator_peer is None  # out of the cluster
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    peer = operator_cli.render_settings(args).operator_peer
    assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "ops"}}
    assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "operator"


# ------------------------------------------------------------- images -> rendered pods


def test_image_flags_reach_every_frontend_and_worker_container(
    rendered_containers: RenderedContainers,
) -> None:
    args = build_parser().parse_args(
        ["operator", "run", "--image", "tandem.local/tandem:dev", "--image-pull-policy", "Never"]
    )
    containers = rendered_containers("reference-cpu.yaml", operator_cli.render_settings(args))
    assert {(c["image"], c["imagePullPolicy"]) for c in containers} == {
        ("tandem.local/tandem:dev", "Never")
    }


def test_trtllm_workers_take_the_trtllm_image_and_the_same_pull_policy(
    rendered_containers: RenderedContainers,
) -> None:
    flags = ["--image", "r.example/t:1", "--trtllm-image", "r.example/trt:1"]
    args = build_parser().parse_args(["operator", "run", *flags, "--image-pull-policy", "Always"])
    containers = rendered_containers("gpt-oss-20b-h100.yaml", operator_cli.render_settings(args))
    images = {c["name"]: (c["image"], c["imagePullPolicy"]) for c in containers}
    assert images["frontend"] == ("r.example/t:1", "Always")
    assert {v for k, v in images.items() if k != "frontend"} == {("r.example/trt:1", "Always")}


def test_an_unknown_pull_policy_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["operator", "run", "--image-pull-policy", "Nevr"])
    assert "--image-pull-policy: invalid choice: 'Nevr'" in capsys.readouterr().err


def test_metrics_bind_loopback_out_of_a_cluster_and_every_address_in_one() -> None:
    assert build_parser().parse_args(["operator", "run"]).metrics_host is None
    assert default_metrics_host(in_cluster=False) == "127.0.0.1"
    # In a pod the kubelet probes the pod IP: the chart passes no --metrics-host.
    assert default_metrics_host(in_cluster=True) == "0.0.0.0"
    chart = Path(__file__).resolve().parents[3] / "charts/tandem/templates/operator-deployment.yaml"
    assert "--metrics-host" not in chart.read_text()


def test_the_metrics_port_is_off_kubectls_default_out_of_a_cluster() -> None:
    # kubectl and helm without a kubeconfig dial localhost:8080.
    assert build_parser().parse_args(["operator", "run"]).metrics_port is None
    assert default_metrics_port(in_cluster=False) == 8081
    assert default_metrics_port(in_cluster=True) == 8080


@pytest.mark.parametrize(
    ("command", "line"),
    [
        (
            "tandem operator run --metrics-port 8080",
            "an operator is already running (pid 7, port 8080): use it, or `kill 7` first "
            "(another one beside it, as a standby, needs its own --metrics-port)",
        ),
        (
            "python -m http.server 8080",
            "port 8080 on 127.0.0.1 is in use by pid 7 (python -m http.server 8080): stop "
            "it, or pass --metrics-port N",
        ),
    ],
)
def test_a_taken_metrics_port_says_what_holds_it(command: str, line: str) -> None:
    taken = PortInUseError("127.0.0.1", 8080, PortHolder(7, command))
    assert operator_cli._port_taken(taken) == line


def test_operator_run_help_shows_every_default() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    operator = sub.choices["operator"]
    run = next(a for a in operator._actions if isinstance(a, argparse._SubParsersAction))
    text = " ".join(run.choices["run"].format_help().split())
    for shown in (
        "port of /metrics, /healthz, /readyz (default: 8081 out of a cluster, where 8080 is "
        "what kubectl and helm dial when no kubeconfig is set; in a pod 8080)",
        "(default: 127.0.0.1 out of a cluster; in a pod 0.0.0.0, for the kubelet's probes)",
        "concurrent reconciles (default: 8)",
        "imagePullPolicy of the frontend and worker containers (default: IfNotPresent)",
        "log level (default: info)",
        "(default: rdma/ib)",
    ):
        assert shown in text, shown
    assert "(default: None)" not in text and "(default: )" not in text


def test_namespaces_repeat_or_separate_with_commas() -> None:
    assert operator_cli._names(["a,b", " c ", "a", ""]) == ("a", "b", "c")
    assert operator_cli._names([]) == ()


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--trtllm-image-for", "a100=r/t:1"], "--trtllm-image-for: 'a100' is not a GPU profile"),
        (["--trtllm-image-for", "gb200"], "--trtllm-image-for: 'gb200': expected PROFILE=IMAGE"),
        (["--frontend-resources", "{"], "--frontend-resources: not JSON"),
        (["--frontend-resources", '{"request": {}}'], "--frontend-resources: expected {"),
        (["--frontend-resources", '{"limits": {"cpu": true}}'], "limits: expected a map"),
        (["--worker-metrics-from", "[1]"], "--worker-metrics-from: expected a JSON list"),
    ],
)
def test_an_unusable_flag_value_ends_the_operator_naming_the_flag(
    flags: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = build_parser().parse_args(["operator", "run", *flags])
    assert operator_cli.cmd_operator_run(args) == 2
    assert line in capsys.readouterr().err


def test_pull_secrets_and_profile_images_reach_the_pods(
    rendered_pod_specs: Callable[[str, Any], list[dict[str, Any]]],
) -> None:
    flags = ["--image-pull-secret", "a,b", "--image-pull-secret", "c"]
    flags += ["--trtllm-image-for", "h100=r.example/trt:h100"]
    args = build_parser().parse_args(["operator", "run", *flags])
    specs = rendered_pod_specs("gpt-oss-20b-h100.yaml", operator_cli.render_settings(args))
    for spec in specs:
        assert spec["imagePullSecrets"] == [{"name": "a"}, {"name": "b"}, {"name": "c"}]
    workers = {c["image"] for s in specs for c in s["containers"] if c["name"] == "worker"}
    assert workers == {"r.example/trt:h100"}


def test_a_cluster_that_pins_its_images_keeps_them_whatever_the_operators_are(
    tmp_path: Path,
) -> None:
    """spec.frontend.image and spec.engine.image: an upgrade of the operator's images
    leaves such a cluster's pods as they are (a staged rollout, docs/operator.md)."""
    from tandem.api.v1alpha1 import PoolRole
    from tandem.api.validate import load_inference_cluster
    from tandem_operator.render.pods import (
        render_frontend_pod_template,
        render_worker_pod_template,
    )

    example = Path(__file__).resolve().parents[3] / "manifests/examples/reference-cpu.yaml"
    cr = load_inference_cluster(example)
    doc = yaml.safe_load(example.read_text())
    doc["spec"]["frontend"] = {**doc["spec"].get("frontend", {}), "image": "r.example/tandem:1"}
    doc["spec"]["engine"] = {**doc["spec"].get("engine", {}), "image": "r.example/tandem:1"}
    (tmp_path / "pinned.yaml").write_text(yaml.safe_dump(doc))
    pinned = load_inference_cluster(tmp_path / "pinned.yaml")

    def images(cluster: Any, image: str) -> list[str]:
        args = build_parser().parse_args(["operator", "run", "--image", image])
        settings = operator_cli.render_settings(args)
        templates = [
            render_frontend_pod_template(cluster, settings, "hash"),
            *(render_worker_pod_template(cluster, r, settings, "hash") for r in PoolRole),
        ]
        return [c["image"] for t in templates for c in t["spec"]["containers"]]

    assert images(cr, "r.example/tandem:2") == ["r.example/tandem:2"] * 3  # follows
    assert images(pinned, "r.example/tandem:2") == ["r.example/tandem:1"] * 3  # keeps
