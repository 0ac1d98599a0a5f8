"""Manifest files on the command line: the ``-f`` option and how load errors are shown."""

from __future__ import annotations

import argparse
import sys

from tandem.api.validate import ManifestError


def add_files_option(parser: argparse.ArgumentParser, *, help: str) -> None:
    """``-f/--filename FILE...`` (repeatable), collected into ``args.files``."""
    parser.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="extend",
        nargs="+",
        required=True,
        metavar="FILE",
        help=help,
    )


def print_manifest_errors(exc: ManifestError) -> None:
    """One ``error: ...`` line on stderr per field error."""
    for err in exc.errors:
        print(f"error: {err}", file=sys.stderr)
