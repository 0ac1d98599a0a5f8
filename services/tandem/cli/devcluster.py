"""``tandem dev cluster up|down|status|import``: a local Kubernetes control plane with
simulated GPU nodes (and, with ``--nodes real``, a real node on this machine), left
running in the background for kubectl and helm."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

from tandem.devcluster import (
    PROFILES,
    BinariesMissingError,
    DevCluster,
    DevClusterError,
    RealNodeError,
    StartOptions,
    default_state_dir,
    open_cluster,
    start_cluster,
    stop_cluster,
)
from tandem.devcluster.kubeconfig import write_private
from tandem.errors import already_running

EXIT_FAILED = 1
# `status` when nothing runs, like `systemctl status` for a stopped unit.
EXIT_NOT_RUNNING = 3


def _progress(message: str) -> None:
    print(f"dev cluster: {message}", file=sys.stderr)


def _reuse(cluster: DevCluster, args: argparse.Namespace) -> int:
    """``up`` while this state dir's cluster runs: print its kubeconfig path, as a fresh
    start would (`export KUBECONFIG=$(tandem dev cluster up)` must never read an empty
    line), if it is what was asked for; else one line saying how to get that."""
    state, root = cluster.state, cluster.state_dir
    if state.profile != args.nodes or (args.with_lws and not state.with_lws):
        lws = " and LeaderWorkerSet" * args.with_lws
        running = already_running(
            f"a dev cluster with profile {state.profile}"
            + (" and LeaderWorkerSet" * state.with_lws),
            port=urlsplit(state.api_url).port,
            fix=f"`tandem dev cluster down --state-dir {root}`",
        )
        print(f"error: {running} (asked for profile {args.nodes}{lws})", file=sys.stderr)
        return EXIT_FAILED
    kubeconfig = Path(state.kubeconfig)
    if args.kubeconfig is not None:
        kubeconfig = args.kubeconfig.expanduser().resolve()
        try:
            write_private(kubeconfig, cluster.layout.kubeconfig.read_text())
        except OSError as err:
            print(f"error: --kubeconfig {kubeconfig}: {err.strerror or err}", file=sys.stderr)
            return EXIT_FAILED
    _progress(f"already running from {root} (profile {state.profile}, {state.api_url}): using it")
    print(kubeconfig)
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    try:
        running = open_cluster(args.state_dir)
    except ValueError:  # an unreadable state file describes nothing that runs
        running = None
    if running is not None and running.is_running():
        return _reuse(running, args)
    options = StartOptions(
        state_dir=args.state_dir,
        profile=args.nodes,
        kubeconfig_path=args.kubeconfig,
        with_lws=args.with_lws,
        timeout_s=args.timeout,
        pause_image=args.pause_image,
    )
    try:
        cluster = start_cluster(options, report=_progress)
    except (BinariesMissingError, DevClusterError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    _progress(f"control plane RSS {cluster.rss_bytes() / 2**20:.0f} MiB")
    if cluster.real_node is not None:
        node = cluster.real_node
        _progress(f"real node {node.name}: pods on {node.bridge} ({node.pod_cidr})")
        _progress(f"load images: tandem dev cluster import --state-dir {cluster.state_dir} FILE")
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


def cmd_import(args: argparse.Namespace) -> int:
    missing = [str(a) for a in args.archives if not a.is_file()]
    if missing:
        print(
            f"error: no image archive at {', '.join(missing)}: `make images` builds "
            "build/images/*.tar",
            file=sys.stderr,
        )
        return EXIT_FAILED
    cluster = open_cluster(args.state_dir)
    if cluster is None or cluster.real_node is None:
        print(
            f"error: no dev cluster with a real node in {args.state_dir}: start one with "
            f"`tandem dev cluster up --nodes real --state-dir {args.state_dir}`",
            file=sys.stderr,
        )
        return EXIT_FAILED
    try:
        cluster.import_images(args.archives)
    except (DevClusterError, RealNodeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    for archive in args.archives:
        print(f"imported {archive}")
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
    print(f"  nodes:      profile {state.profile}" + (" + LeaderWorkerSet" * state.with_lws))
    if cluster.real_node is not None:
        node = cluster.real_node
        node_status = node.status()
        phase = node_status.phase if node_status is not None else "unknown"
        print(f"  real node:  {node.name} ({phase}), pods on {node.bridge} {node.pod_cidr}")
        for name, daemon_rss in sorted(node.daemon_rss_bytes().items()):
            print(f"  {'  ' + name:<24} {'(real node)':<21} {daemon_rss / 2**20:7.0f} MiB")
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
        "--with-lws",
        action="store_true",
        help="install the LeaderWorkerSet CRDs and run its controller (sigs.k8s.io/lws, built "
        "by `make lws-build`)",
    )
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for readiness")
    up.add_argument(
        "--pause-image",
        type=Path,
        help="real node: OCI archive of registry.k8s.io/pause:3.10 (default: built by "
        "`make images`, built now if missing)",
    )
    up.set_defaults(handler=cmd_up)

    load = cluster_sub.add_parser(
        "import",
        parents=[state_dir],
        help="load OCI image archives into the real node's containerd (build/images/*.tar)",
    )
    load.add_argument("archives", type=Path, nargs="+", metavar="ARCHIVE")
    load.set_defaults(handler=cmd_import)

    down = cluster_sub.add_parser("down", parents=[state_dir], help="stop the cluster")
    down.set_defaults(handler=cmd_down)

    status = cluster_sub.add_parser("status", parents=[state_dir], help="say what runs")
    status.set_defaults(handler=cmd_status)
