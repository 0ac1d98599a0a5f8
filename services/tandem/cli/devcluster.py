"""``tandem dev cluster up|down|status``: a local Kubernetes control plane with simulated
GPU nodes, left running in the background for kubectl and helm."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tandem.devcluster import (
    PROFILES,
    BinariesMissingError,
    DevClusterError,
    StartOptions,
    default_state_dir,
    open_cluster,
    start_cluster,
    stop_cluster,
)

EXIT_FAILED = 1
# `status` when nothing runs, like `systemctl status` for a stopped unit.
EXIT_NOT_RUNNING = 3


def _progress(message: str) -> None:
    print(f"dev cluster: {message}", file=sys.stderr)


def cmd_up(args: argparse.Namespace) -> int:
    options = StartOptions(
        state_dir=args.state_dir,
        profile=args.nodes,
        kubeconfig_path=args.kubeconfig,
        with_lws=args.with_lws,
        timeout_s=args.timeout,
    )
    try:
        cluster = start_cluster(options, report=_progress)
    except (BinariesMissingError, DevClusterError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    _progress(f"control plane RSS {cluster.rss_bytes() / 2**20:.0f} MiB")
    _progress(f"stop it with: tandem dev cluster down --state-dir {cluster.state_dir}")
    # stdout carries only the kubeconfig path, so `export KUBECONFIG=$(tandem dev cluster up)`
    # works.
    print(cluster.kubeconfig)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    try:
        cluster = stop_cluster(args.state_dir)
    except DevClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    if cluster is None:
        print(f"no dev cluster recorded in {args.state_dir}")
    else:
        print(f"stopped the dev cluster in {cluster.state_dir} (logs in {cluster.layout.logs_dir})")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    cluster = open_cluster(args.state_dir)
    if cluster is None:
        print(f"no dev cluster recorded in {args.state_dir}")
        return EXIT_NOT_RUNNING
    described = cluster.describe()
    running = [s for s in described if s.running]
    state = cluster.state
    if not running:
        summary = "stopped"
    elif len(running) == len(described):
        summary = "running"
    else:
        summary = "degraded"
    print(f"dev cluster: {summary}")
    print(f"  api:        {state.api_url}")
    print(f"  kubeconfig: {state.kubeconfig}")
    print(f"  nodes:      profile {state.profile}" + (" + LeaderWorkerSet CRD" * state.with_lws))
    if running:
        uptime = time.time() - state.started_at
        print(f"  up for:     {uptime:.0f}s (ready after {state.ready_after_s or 0:.1f}s)")
    for s in described:
        rss = f"{s.rss_bytes / 2**20:7.0f} MiB" if s.running else "        -"
        print(f"  {s.name:<24} pid {s.pid:<8} {'running' if s.running else 'stopped':<8} {rss}")
    if running:
        print(f"  {'total':<24} {'':<21} {cluster.rss_bytes() / 2**20:7.0f} MiB")
    return 0 if summary == "running" else EXIT_NOT_RUNNING


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dev = sub.add_parser("dev", help="developer tools")
    dev_sub = dev.add_subparsers(dest="dev_command", required=True, metavar="COMMAND")
    cluster = dev_sub.add_parser(
        "cluster", help="a local Kubernetes control plane with simulated GPU nodes"
    )
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True, metavar="COMMAND")

    state_dir = argparse.ArgumentParser(add_help=False)
    state_dir.add_argument(
        "--state-dir",
        type=Path,
        default=default_state_dir(),
        help="where PIDs, logs, certificates and etcd data live "
        "(default: $TANDEM_HOME/devcluster or ~/.tandem/devcluster)",
    )

    up = cluster_sub.add_parser(
        "up",
        parents=[state_dir],
        help="start the cluster in the background and print its kubeconfig path",
    )
    up.add_argument(
        "--nodes",
        default="default",
        choices=sorted(PROFILES),
        metavar="PROFILE",
        help="simulated node profile: "
        + "; ".join(f"{p.name}: {p.description}" for p in PROFILES.values()),
    )
    up.add_argument("--kubeconfig", type=Path, help="also write the admin kubeconfig to this path")
    up.add_argument(
        "--with-lws", action="store_true", help="install the LeaderWorkerSet CRD (sigs.k8s.io/lws)"
    )
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for readiness")
    up.set_defaults(handler=cmd_up)

    down = cluster_sub.add_parser("down", parents=[state_dir], help="stop the cluster")
    down.set_defaults(handler=cmd_down)

    status = cluster_sub.add_parser("status", parents=[state_dir], help="say what runs")
    status.set_defaults(handler=cmd_status)
