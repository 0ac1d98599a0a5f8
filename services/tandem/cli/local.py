"""``tandem up``, ``tandem down`` and ``tandem status``: a cluster as local processes."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

from tandem.api.v1alpha1 import InferenceCluster, PlanningMode
from tandem.api.validate import ManifestError, load_inference_cluster
from tandem.cli.manifest_files import print_manifest_errors
from tandem.perf.table import load_perf_table
from tandem.runtime.launcher import LaunchError, detach, down, run_foreground
from tandem.runtime.plan import WORKER_MODULE
from tandem.runtime.preflight import local_run_errors
from tandem.runtime.state import cluster_dir, list_clusters
from tandem.runtime.status import collect_status, render_status
from tandem.runtime.tracing_flags import add_tracing_flags, apply_tracing_flags, tracing_argv

EXIT_USAGE = 2


def _say(line: str) -> None:
    print(line, flush=True)


def cmd_up(args: argparse.Namespace) -> int:
    try:
        cluster = load_inference_cluster(args.filename)
        problems = local_run_errors(cluster, args.filename)
        if problems:
            raise ManifestError(problems)
        cluster = apply_tracing_flags(cluster, args)
    except ManifestError as exc:
        print_manifest_errors(exc)
        return EXIT_USAGE
    except ValueError as exc:  # a bad tracing flag
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        perf_table = read_perf_table(args.perf_table, cluster)
    except ValueError as exc:
        print(f"error: --perf-table: {exc}", file=sys.stderr)
        return EXIT_USAGE
    port = cluster.spec.frontend.port if args.port is None else args.port
    module = args.worker_module
    if not _importable(module):
        print(
            f"error: --worker-module {module}: no such module for {sys.executable} "
            "(install the package that provides it into this environment)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        if args.detach:
            table = ["--perf-table", str(Path(args.perf_table).resolve())] if perf_table else []
            return detach(
                Path(args.filename).resolve(),
                cluster,
                port=port,
                progress=_say,
                worker_module=module,
                extra_argv=[*tracing_argv(args), *table],
            )
        return run_foreground(
            cluster, port=port, progress=_say, worker_module=module, perf_table=perf_table
        )
    except LaunchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def read_perf_table(path: str | None, cluster: InferenceCluster) -> str | None:
    """The text of the step-time table at ``path`` (None: none given), once it is known
    to be one and something plans from it; ValueError says why not."""
    if path is None:
        return None
    if cluster.spec.planning.mode is PlanningMode.OFF:
        raise ValueError(
            "spec.planning.mode is off, so nothing plans from a table (set it to check or auto)"
        )
    load_perf_table(path)  # a PerfTableError (a ValueError) names the file and the field
    return Path(path).read_text()


START_ONE = "start one with `tandem up -f FILE --detach`"


def pick_cluster(name: str | None, filename: str | None = None) -> str | None:
    """The local cluster a command targets: ``name``, the name in ``filename``, or the only
    one running. None (the reason said on stderr) when that cannot be told."""
    if name:
        return name
    if filename:
        try:
            return load_inference_cluster(filename).metadata.name
        except ManifestError as exc:
            print_manifest_errors(exc)
            return None
    running = list_clusters()
    if len(running) == 1:
        return running[0]
    if not running:
        print(f"error: no local cluster is running: {START_ONE}", file=sys.stderr)
    else:
        choices = " or ".join(f"--name {n}" for n in running)
        print(f"error: {len(running)} local clusters are running: pass {choices}", file=sys.stderr)
    return None


def not_running(name: str) -> str:
    """``cluster 'x' is not running``, and what is (or how to start one)."""
    running = list_clusters()
    hint = f"running: {', '.join(running)}" if running else START_ONE
    return f"cluster {name!r} is not running ({hint})"


def cmd_down(args: argparse.Namespace) -> int:
    names = list_clusters() if args.all else [pick_cluster(args.name, args.filename)]
    if None in names:
        return 1
    for name in names:
        if name is not None:
            down(name, progress=_say)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    name = pick_cluster(args.name, args.filename)
    if name is None:
        return 1
    status = collect_status(cluster_dir(name))
    if status is None:
        print(f"error: {not_running(name)}", file=sys.stderr)
        return 1
    print(json.dumps(status, indent=2) if args.json else render_status(status))
    return 0


def _importable(module: str) -> bool:
    """Whether ``python -m MODULE`` can start here (workers run with this interpreter)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a missing parent package, or an empty name
        return False


def _target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--filename", help="the InferenceCluster file")
    parser.add_argument("--name", help="the cluster's metadata.name")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("up", help="run an InferenceCluster as local processes")
    p.add_argument("-f", "--filename", required=True, help="the InferenceCluster file")
    p.add_argument("--port", type=int, help="frontend port (default spec.frontend.port; 0=any)")
    p.add_argument("--detach", action="store_true", help="return once ready; stop with down")
    p.add_argument(
        "--worker-module",
        default=WORKER_MODULE,
        metavar="MODULE",
        help=f"run each worker as `python -m MODULE` (default {WORKER_MODULE}): another "
        "program serving Tandem's worker gRPC API (docs/architecture.md, Another worker program)",
    )
    p.add_argument(
        "--perf-table",
        metavar="FILE",
        help="step times measured by `tandem profile`: what spec.planning plans a reference "
        "engine from (docs/simulated-engine.md)",
    )
    add_tracing_flags(p)
    p.set_defaults(handler=cmd_up)

    p = subparsers.add_parser("down", help="stop a local cluster started by `tandem up`")
    _target(p)
    p.add_argument("--all", action="store_true", help="stop every local cluster")
    p.set_defaults(handler=cmd_down)

    p = subparsers.add_parser("status", help="show a local cluster's pools and workers")
    _target(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_status)
