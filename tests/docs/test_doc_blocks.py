"""Every command block in README.md and docs/*.md is run by a test or marked illustrative
with the reason (the rules: tests/docs/conftest.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest

pytestmark = pytest.mark.parallel


def test_every_runnable_block_is_run_or_marked(docs: Any) -> None:
    problems = [
        problem
        for path in docs.files()
        for block in docs.blocks(path)
        if (problem := block.problem()) is not None
    ]
    assert problems == [], "\n".join(problems)


def test_every_sequence_names_a_test_that_exists(docs: Any) -> None:
    marked = {
        f"{block.path}#{block.sequence}"
        for path in docs.files()
        for block in docs.blocks(path)
        if block.sequence is not None
    }
    assert marked == set(docs.run_by), "RUN_BY lists a sequence no doc marks, or misses one"
    for key, node in docs.run_by.items():
        file, _, name = node.partition("::")
        source = (docs.repo / file).read_text()
        assert re.search(rf"^def {name}\(", source, flags=re.MULTILINE), f"{key}: no {node}"
        assert f'"{key.split("#")[0]}", "{key.split("#")[1]}"' in source, (
            f"{node} does not run {key}"
        )


@pytest.mark.parametrize(
    ("expected", "actual", "matches"),
    [
        ("fits; at most 48 GPUs", "fits; at most 48 GPUs\n", True),
        ("batch 2 (...); weights", "batch 2 (from autoscaling); weights", True),
        ("a\n...\nd", "a\nb\nc\nd", True),
        ("fits; at most 48 GPUs", "fits; at most 40 GPUs", False),
        ("a\n...\nd", "a\nb\nc", False),
    ],
)
def test_console_output_is_compared_with_ellipses(
    docs: Any, expected: str, actual: str, matches: bool
) -> None:
    assert docs.matches(expected, actual) is matches
