"""The ``tandem`` command line: one entry point, one module per command group."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from tandem.cli import ask, devcluster, keys, local, manifests, operator, plan, profile


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """``--help`` shows every option's default, unless its text already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if "(default" in text or not action.option_strings:
            return text
        if default is None or default is False or default == "" or default is argparse.SUPPRESS:
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """Every ``tandem`` (sub)command's parser: sub-parsers are made of the same class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """A usage mistake is one line, like every other error, pointing at ``--help``."""
        self.exit(2, f"error: {self.prog}: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = Parser(
        prog="tandem",
        description="Disaggregated prefill/decode LLM serving on Kubernetes.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    manifests.register(sub)
    devcluster.register(sub)
    operator.register(sub)
    plan.register(sub)
    profile.register(sub)
    local.register(sub)
    ask.register(sub)
    keys.register(sub)
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
