"""``tandem validate``, ``tandem crds`` and ``tandem version``: the API as a user sees it."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import version as dist_version
from pathlib import Path

from tandem.api.crd import dump_crd, render_crds
from tandem.api.validate import ManifestError, load_file
from tandem.cli.manifest_files import add_files_option, print_manifest_errors

# Exit codes: 0 valid, 2 invalid input (argparse also uses 2 for bad usage).
EXIT_INVALID = 2

# Where generated CRDs live, relative to the repository root.
CRD_DIRS = (Path("manifests/crds"), Path("charts/tandem/crds"))


def cmd_validate(args: argparse.Namespace) -> int:
    failed = False
    for name in args.files:
        try:
            objects = load_file(name)
        except ManifestError as exc:
            failed = True
            print_manifest_errors(exc)
            continue
        for obj in objects:
            print(f"{name}: {obj.kind}/{obj.metadata.name} is valid")  # type: ignore[attr-defined]
    return EXIT_INVALID if failed else 0


def cmd_crds(args: argparse.Namespace) -> int:
    rendered = {name: dump_crd(crd) for name, crd in render_crds().items()}
    if not (args.write or args.check):
        sys.stdout.write("---\n".join(rendered.values()))
        return 0
    root = Path(args.root)
    stale = []
    for directory in CRD_DIRS:
        for name, text in rendered.items():
            path = root / directory / name
            if args.check:
                if not path.exists() or path.read_text() != text:
                    stale.append(str(path))
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
                print(f"wrote {path}")
    if stale:
        print(f"out of date (run `make crds`): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


def cmd_version(args: argparse.Namespace) -> int:
    print(f"tandem {dist_version('tandem')}")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("validate", help="validate InferenceCluster/WorkerPool manifests")
    add_files_option(p, help="manifest files (repeat -f or list several)")
    p.set_defaults(handler=cmd_validate)

    p = sub.add_parser("crds", help="print (or write/check) the generated CRDs")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="write manifests/ and chart CRDs")
    mode.add_argument("--check", action="store_true", help="fail if committed CRDs are stale")
    p.add_argument("--root", default=".", help="repository root (default: .)")
    p.set_defaults(handler=cmd_crds)

    p = sub.add_parser("version", help="print the version")
    p.set_defaults(handler=cmd_version)
