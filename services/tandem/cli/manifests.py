"""``tandem validate``, ``tandem crds`` and ``tandem version``: the API as a user sees it."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import version as dist_version
from pathlib import Path

from tandem.api.base import ApiModel
from tandem.api.crd import dump_crd, render_crds
from tandem.api.v1alpha1 import InferenceCluster
from tandem.api.validate import ManifestError, load_file
from tandem.cli import crds_apply
from tandem.cli.manifest_files import add_files_option, print_manifest_errors
from tandem.runtime.preflight import package_source_errors

# Exit codes: 0 valid, 2 invalid input (argparse also uses 2 for bad usage).
EXIT_INVALID = 2

# Where generated CRDs live, relative to the repository root.
CRD_DIRS = (Path("manifests/crds"), Path("charts/tandem/crds"))


def cmd_validate(args: argparse.Namespace) -> int:
    failed = False
    previous: list[ApiModel] = []
    if args.previous:
        try:
            previous = load_file(args.previous)
        except ManifestError as exc:
            print_manifest_errors(exc)
            print(f"error: --previous {args.previous} must itself be valid", file=sys.stderr)
            return EXIT_INVALID
    for name in args.files:
        try:
            objects = load_file(name, previous)
            problems = [
                error
                for obj in objects
                if isinstance(obj, InferenceCluster)
                for error in package_source_errors(obj, name)
            ]
            if problems:
                raise ManifestError(problems)
        except ManifestError as exc:
            failed = True
            print_manifest_errors(exc)
            continue
        for obj in objects:
            print(f"{name}: {obj.kind}/{obj.metadata.name} is valid")  # type: ignore[attr-defined]
    return EXIT_INVALID if failed else 0


def cmd_crds(args: argparse.Namespace) -> int:
    if args.action == "apply":
        if args.write or args.check:
            print("error: `tandem crds apply` takes neither --write nor --check", file=sys.stderr)
            return EXIT_INVALID
        return crds_apply.cmd_apply(args)
    rendered = {name: dump_crd(crd) for name, crd in render_crds().items()}
    if not (args.write or args.check):
        sys.stdout.write("---\n".join(rendered.values()))
        return 0
    root = Path(args.root)
    missing, stale = [], []
    for directory in CRD_DIRS:
        for name, text in rendered.items():
            path = root / directory / name
            if not args.check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
                print(f"wrote {path}")
            elif not path.is_file():
                missing.append(str(directory / name))
            elif path.read_text() != text:
                stale.append(str(path))
    if missing:
        print(
            f"error: missing under {root.resolve()}: {', '.join(missing)}; run it in the "
            "repository root or pass --root DIR (`tandem crds --write` writes them)",
            file=sys.stderr,
        )
    if stale:
        print(f"error: out of date (run `make crds`): {', '.join(stale)}", file=sys.stderr)
    return 1 if missing or stale else 0


def cmd_version(args: argparse.Namespace) -> int:
    print(f"tandem {dist_version('tandem')}")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("validate", help="validate InferenceCluster/WorkerPool manifests")
    add_files_option(p, help="manifest files (repeat -f or list several)")
    p.add_argument(
        "--previous",
        metavar="FILE",
        help="the objects as they are now: also check the files as updates of them "
        "(immutable fields), as the API server does on kubectl apply",
    )
    p.set_defaults(handler=cmd_validate)

    p = sub.add_parser(
        "crds",
        help="print (or write/check) the generated CRDs; `apply` them to a cluster",
        description="Print the CRDs, write or check the repository's copies, or `tandem crds "
        "apply` them to the cluster (server-side apply, before `helm upgrade`: Helm never "
        "upgrades CRDs).",
    )
    p.add_argument("action", nargs="?", choices=("apply",), help="apply to the cluster")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="write manifests/ and chart CRDs")
    mode.add_argument("--check", action="store_true", help="fail if committed CRDs are stale")
    p.add_argument("--root", default=".", help="repository root (default: .)")
    p.add_argument("--kubeconfig", help="apply: default $KUBECONFIG or ~/.kube/config")
    p.add_argument("--context", help="apply: kubeconfig context (default: the current one)")
    p.add_argument("--dry-run", action="store_true", help="apply: server-side dry run only")
    p.set_defaults(handler=cmd_crds)

    p = sub.add_parser("version", help="print the version")
    p.set_defaults(handler=cmd_version)
