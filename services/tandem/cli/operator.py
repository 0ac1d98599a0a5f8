"""``tandem operator run``: the Kubernetes operator, in or out of a cluster.

Out of cluster (development, and e2e on the simulated cluster whose pods run no
containers) it uses ``--kubeconfig`` (or $KUBECONFIG / ~/.kube/config); in a pod it uses
the ServiceAccount. Either way it competes for the same leader Lease as the chart's
replicas, so at most one instance reconciles.

The import of ``tandem_operator`` happens inside the command: the ``tandem`` library never
depends on the operator package; only this entry point (the composition root) does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from tandem.errors import already_running
from tandem.portcheck import PortError, PortInUseError

SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DEFAULT_NAMESPACE = "tandem-system"


def _names(values: Sequence[str]) -> tuple[str, ...]:
    """A repeatable, comma-separated flag (``--namespace a,b --namespace c``) -> ("a", "b",
    "c"), in order, without repeats."""
    found = (n.strip() for value in values for n in value.split(","))
    return tuple(dict.fromkeys(n for n in found if n))


def _default_lease_namespace() -> str:
    """The pod's own namespace in a cluster, else the chart's conventional one."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    with contextlib.suppress(OSError):
        return SA_NAMESPACE_FILE.read_text().strip()
    return DEFAULT_NAMESPACE


PULL_POLICIES = ("Always", "IfNotPresent", "Never")


class FlagError(ValueError):
    """A flag's value the operator cannot use; the message starts with the flag."""

    def __init__(self, flag: str, problem: ValueError) -> None:
        super().__init__(f"{flag}: {problem}")


def parse_peers(text: str) -> tuple[dict[str, Any], ...]:
    """``--worker-metrics-from``: a JSON list of NetworkPolicyPeer objects."""
    try:
        peers = json.loads(text) if text else []
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(peers, list) or not all(isinstance(p, dict) and p for p in peers):
        raise ValueError(
            'expected a JSON list of NetworkPolicyPeer objects, e.g. [{"namespaceSelector": '
            '{"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]'
        )
    return tuple(peers)


def parse_resources(text: str) -> dict[str, dict[str, str]]:
    """``--frontend-resources``: a JSON ResourceRequirements (requests, limits)."""
    try:
        resources = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    sections = ("requests", "limits")
    if not isinstance(resources, dict) or not set(resources) <= set(sections):
        raise ValueError('expected {"requests": {...}, "limits": {...}}')
    out: dict[str, dict[str, str]] = {}
    for section, quantities in resources.items():
        if not isinstance(quantities, dict) or not all(
            isinstance(v, str | int) and not isinstance(v, bool) for v in quantities.values()
        ):
            raise ValueError(f'{section}: expected a map of quantities, e.g. {{"cpu": "1"}}')
        # Quantities travel as strings: the API server canonicalizes them that way.
        out[section] = {str(k): str(v) for k, v in quantities.items()}
    return out


def parse_profile_images(values: Sequence[str]) -> dict[str, str]:
    """``--trtllm-image-for gb200=REF`` (repeatable) -> {"gb200": "REF"}."""
    profiles: Any = importlib.import_module("tandem_operator.render.profiles")
    gpu_profiles = sorted(p.value for p, hw in profiles.PROFILES.items() if hw.has_gpus)
    images: dict[str, str] = {}
    for value in values:
        profile, sep, image = value.partition("=")
        if not sep or not image:
            raise ValueError(f"{value!r}: expected PROFILE=IMAGE, e.g. gb200=r.example/trt:1")
        if profile not in gpu_profiles:
            raise ValueError(f"{profile!r} is not a GPU profile ({', '.join(gpu_profiles)})")
        images[profile] = image
    return images


def _in_cluster(args: argparse.Namespace) -> bool:
    return args.kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ


def render_settings(args: argparse.Namespace) -> Any:
    """The operator's RenderSettings from its flags (images, pull policy, hardware) and,
    in a cluster, its own namespace (the frontends' NetworkPolicy admits its pods)."""
    pods: Any = importlib.import_module("tandem_operator.render.pods")
    profiles: Any = importlib.import_module("tandem_operator.render.profiles")
    fabric: Any = importlib.import_module("tandem_operator.render.fabric")
    policies: Any = importlib.import_module("tandem_operator.render.network_policy")
    own_namespace = _default_lease_namespace() if _in_cluster(args) else None
    parsed: dict[str, Any] = {}
    for flag, parse, value, key in (
        ("--worker-metrics-from", parse_peers, args.worker_metrics_from, "worker_metrics_from"),
        ("--trtllm-image-for", parse_profile_images, args.trtllm_image_for, "trtllm_images"),
        ("--frontend-resources", parse_resources, args.frontend_resources, "frontend_resources"),
    ):
        if not value:
            continue  # RenderSettings' default
        try:
            parsed[key] = parse(value)
        except ValueError as exc:
            raise FlagError(flag, exc) from None
    return pods.RenderSettings(
        image=args.image,
        trtllm_image=args.trtllm_image,
        image_pull_policy=args.image_pull_policy,
        image_pull_secrets=_names(args.image_pull_secret or ()),
        operator_peer=policies.operator_peer(own_namespace) if own_namespace else None,
        hardware=profiles.HardwareOptions(
            compute_domains=args.compute_domains,
            rdma=fabric.RdmaOptions(
                resource=args.rdma_resource or None,
                per_gpu=not args.rdma_shared,
                net_devices=args.rdma_net_devices,
            ),
        ),
        **parsed,
    )


def cmd_operator_run(args: argparse.Namespace) -> int:
    manager: Any = importlib.import_module("tandem_operator.manager")
    k8s: Any = importlib.import_module("tandem_operator.kube.client")
    metrics_source: Any = importlib.import_module("tandem_operator.scaling.metrics_source")
    logging.getLogger().setLevel(getattr(logging, args.log_level.upper()))
    try:
        settings = render_settings(args)
    except FlagError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        metrics_urls = metrics_source.parse_url_overrides(args.frontend_metrics_url or ())
    except ValueError as exc:
        print(f"error: --frontend-metrics-url: {exc}", file=sys.stderr)
        return 2
    for flag in ("credential_propagation_seconds", "plan_timeout_seconds"):
        if getattr(args, flag) <= 0:
            print(f"error: --{flag.replace('_', '-')} must be positive", file=sys.stderr)
            return 2
    in_cluster = _in_cluster(args)
    kwargs: dict[str, Any] = {}
    if args.identity:
        kwargs["identity"] = args.identity
    options = manager.OperatorOptions(
        kubeconfig=args.kubeconfig,
        in_cluster=in_cluster,
        namespaces=_names(args.namespace or ()),
        metrics_host=args.metrics_host or manager.default_metrics_host(in_cluster),
        metrics_port=args.metrics_port or manager.default_metrics_port(in_cluster),
        leader_election_namespace=args.leader_election_namespace or _default_lease_namespace(),
        workers=args.workers,
        settings=settings,
        frontend_metrics_urls=metrics_urls,
        credential_propagation=timedelta(seconds=args.credential_propagation_seconds),
        plan_timeout_seconds=args.plan_timeout_seconds,
        **kwargs,
    )

    async def main() -> None:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            if task is not None:
                loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await manager.run(options)

    try:
        asyncio.run(main())
    except k8s.ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except PortError as exc:
        print(f"error: {_port_taken(exc)}", file=sys.stderr)
        return 1
    return 0


def _port_taken(exc: PortError) -> str:
    """What to do about a metrics port we cannot listen on."""
    holder = exc.holder if isinstance(exc, PortInUseError) else None
    if holder is not None and "operator run" in holder.command:
        return (
            already_running(
                "an operator",
                pid=holder.pid,
                port=exc.port,
                fix=f"`kill {holder.pid}`",
            )
            + " (another one beside it, as a standby, needs its own --metrics-port)"
        )
    return f"{exc}: stop it, or pass --metrics-port N"


def register(subparsers: Any) -> None:
    """Add ``tandem operator run`` to the top-level parser."""
    group = subparsers.add_parser("operator", help="run the Kubernetes operator")
    commands = group.add_subparsers(dest="operator_command", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="reconcile InferenceClusters (leader-elected; in or out of the cluster)",
        description="Run the Tandem operator. Out of a cluster it uses --kubeconfig.",
    )
    run.add_argument(
        "--kubeconfig",
        help="kubeconfig file (default: in a pod its ServiceAccount, else $KUBECONFIG, "
        "else ~/.kube/config)",
    )
    run.add_argument(
        "--namespace",
        action="append",
        help="watch only these namespaces: repeat it or separate them with commas "
        "(default: all; the chart's operator.watchNamespaces)",
    )
    run.add_argument(
        "--metrics-port",
        type=int,
        help="port of /metrics, /healthz, /readyz (default: 8081 out of a cluster, where "
        "8080 is what kubectl and helm dial when no kubeconfig is set; in a pod 8080)",
    )
    run.add_argument(
        "--metrics-host",
        help="address to serve them on (default: 127.0.0.1 out of a cluster; in a pod "
        "0.0.0.0, for the kubelet's probes)",
    )
    run.add_argument(
        "--leader-election-namespace",
        help=f"namespace of the leader Lease (default: the pod's, else {DEFAULT_NAMESPACE})",
    )
    run.add_argument("--identity", help="leader election identity (default: host_random)")
    run.add_argument("--workers", type=int, default=8, help="concurrent reconciles")
    run.add_argument(
        "--image",
        default="ghcr.io/tandem-dev/tandem:0.1.0",
        help="image of the frontend and the reference-engine workers",
    )
    run.add_argument(
        "--trtllm-image",
        default="ghcr.io/tandem-dev/tandem-trtllm:0.1.0",
        help="image of TensorRT-LLM workers (unless spec.engine.image is set)",
    )
    run.add_argument(
        "--trtllm-image-for",
        action="append",
        metavar="PROFILE=IMAGE",
        help="image of TensorRT-LLM workers on one accelerator profile (gb200, b200, h200, "
        "h100), instead of --trtllm-image; e.g. an arm64-only build for gb200. Repeatable",
    )
    run.add_argument(
        "--image-pull-secret",
        action="append",
        metavar="NAME",
        help="imagePullSecrets of the frontend and worker pods: a Secret of this name must "
        "exist in each InferenceCluster's namespace. Repeat it or separate with commas",
    )
    run.add_argument(
        "--image-pull-policy",
        default="IfNotPresent",
        choices=PULL_POLICIES,
        help="imagePullPolicy of the frontend and worker containers",
    )
    run.add_argument(
        "--frontend-resources",
        default="",
        metavar="JSON",
        help='resources of the frontend containers, e.g. {"requests": {"cpu": "1", "memory": '
        '"1Gi"}, "limits": {"memory": "4Gi"}} (default: requests 500m CPU and 512Mi, limit '
        "2Gi)",
    )
    run.add_argument(
        "--compute-domains",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="GB200: a ComputeDomain per cluster for multi-node NVLink (needs NVIDIA's DRA "
        "driver for GPUs)",
    )
    run.add_argument(
        "--rdma-resource",
        default="rdma/ib",
        help="RDMA device-plugin resource GPU workers request ('' for none)",
    )
    run.add_argument(
        "--rdma-shared",
        action="store_true",
        help="request one shared RDMA device per worker instead of one per GPU",
    )
    run.add_argument(
        "--rdma-net-devices", default="", help="UCX_NET_DEVICES / NCCL_IB_HCA, e.g. mlx5_0:1"
    )
    run.add_argument(
        "--frontend-metrics-url",
        action="append",
        metavar="NAMESPACE/NAME=URL",
        help="autoscaler: read this cluster's router metrics from URL instead of its "
        "frontend pods (or *=URL for every cluster); for running out of the cluster, "
        "e.g. through a port-forward. Repeatable. (default: none; out of a cluster the "
        "autoscaler then cannot read load, and says so in each cluster's status)",
    )
    run.add_argument(
        "--worker-metrics-from",
        default="",
        metavar="JSON",
        help="NetworkPolicy: peers (a JSON list of NetworkPolicyPeer) that may scrape the "
        "workers' /metrics port; by default only the cluster's own pods reach workers",
    )
    run.add_argument(
        "--credential-propagation-seconds",
        type=float,
        default=150.0,
        help="how long each phase of a credentials or MPI SSH key rotation waits for every "
        "pod's mounted Secret to update (kubelet sync period plus cache TTL, with room to spare)",
    )
    run.add_argument(
        "--plan-timeout-seconds",
        type=float,
        default=120.0,
        help="planning.mode check/auto: how long one plan may run before the operator kills "
        "it and reports PlanningFailed (each plan is a child process busy on one core)",
    )
    run.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level",
    )
    run.set_defaults(handler=cmd_operator_run)
