"""docs/operator.md lists every flag of ``tandem operator run``, and no flag it lacks."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import yaml

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


def table_rows() -> list[list[str]]:
    """The cells of each row of the flag table (its header is ``| flag |``)."""
    lines = DOC.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| flag | default |"))
    rows: list[list[str]] = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1:-1])
    return rows


def documented_flags() -> set[str]:
    """The first cell of each row of the flag table."""
    return {flag for row in table_rows() for flag in re.findall(r"`(--[a-z-]+)", row[0])}


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


def test_every_chart_value_the_table_names_is_in_values_yaml() -> None:
    values: dict[str, Any] = yaml.safe_load((REPO / "charts/tandem/values.yaml").read_text())
    named = [v for row in table_rows() for v in re.findall(r"`([a-zA-Z.]+)(?:\.\*)?`", row[-1])]
    assert "fabric.computeDomains" in named and "dataPlane.imagePullSecrets" in named
    for path in named:
        node: Any = values
        for key in path.split("."):
            assert isinstance(node, dict) and key in node, f"values.yaml has no {path}"
            node = node[key]
