"""``python -m tandem.devimages build [NAME...]`` (what ``make images`` runs) and ``index``."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence

from tandem.devimages.build import ensure_images, index_path, load_index
from tandem.devimages.catalog import RECIPES, default_build_dir, find_checkout
from tandem.devimages.errors import ImageBuildError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tandem.devimages")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build the images that are out of date")
    known = ", ".join(r.name for r in RECIPES)
    build.add_argument("names", nargs="*", metavar="NAME", help=f"{known} (default: all)")
    build.add_argument("--force", action="store_true", help="rebuild even when up to date")
    commands.add_parser("index", help="print the index of built images (JSON)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="images: %(message)s")

    build_dir = default_build_dir(find_checkout())
    if args.command == "index":
        print(index_path(build_dir).read_text() if load_index(build_dir) else "{}")
        return 0
    unknown = [n for n in args.names if n not in {r.name for r in RECIPES}]
    if unknown:
        parser.error(f"no image named {', '.join(unknown)} (known: {known})")
    started = time.monotonic()
    try:
        images = ensure_images(args.names or None, force=args.force)
    except ImageBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for image in images.values():
        print(f"{image.reference}  {image.archive}  {image.size / 2**20:.1f} MiB  {image.digest}")
    print(f"index: {index_path(build_dir)} ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
