"""The ``tandem`` command line: one entry point, one module per command group."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from tandem.cli import ask, devcluster, local, manifests, operator, plan


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tandem",
        description="Disaggregated prefill/decode LLM serving on Kubernetes.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    manifests.register(sub)
    devcluster.register(sub)
    operator.register(sub)
    plan.register(sub)
    local.register(sub)
    ask.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
