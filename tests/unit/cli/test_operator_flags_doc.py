"""docs/operator.md lists every flag of ``tandem operator run``, and no flag it lacks."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from tandem.cli.main import build_parser

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "operator.md"


def subparser(parser: argparse.ArgumentParser, *path: str) -> argparse.ArgumentParser:
    for name in path:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = actions[0].choices[name]
    return parser


def parser_flags() -> set[str]:
    run = subparser(build_parser(), "operator", "run")
    return {
        option
        for action in run._actions
        if not isinstance(action, argparse._HelpAction)
        for option in action.option_strings
    }


def documented_flags() -> set[str]:
    """The first cell of each row of the flag table (its header is ``| flag |``)."""
    lines = DOC.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| flag | default |"))
    flags: set[str] = set()
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cell = line.split("|")[1]
        flags |= {flag for flag in re.findall(r"`(--[a-z-]+)", cell)}
    return flags


def test_operator_doc_lists_every_flag_of_the_parser() -> None:
    parser, doc = parser_flags(), documented_flags()
    assert not parser - doc, f"docs/operator.md lacks {sorted(parser - doc)}"
    assert not doc - parser, (
        f"docs/operator.md lists flags the parser lacks: {sorted(doc - parser)}"
    )


def test_the_fabric_flags_are_there() -> None:
    assert {"--rdma-resource", "--rdma-shared", "--compute-domains", "--no-compute-domains"} <= (
        documented_flags()
    )
