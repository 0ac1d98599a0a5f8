"""A problem that lasts is logged once when it starts, once when it clears."""

from __future__ import annotations

import logging

import pytest

from tandem_operator.problems import RecurringProblem


def test_a_lasting_problem_is_logged_once_and_its_end_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("test.problems")
    caplog.set_level(logging.DEBUG, logger="test.problems")
    problem = RecurringProblem(log)
    problem.resolve("fine")  # nothing was wrong: silence
    for _ in range(3):
        problem.report("namespace x does not exist")
    problem.report("cannot reach the API server")  # another problem: said too
    problem.resolve("works again")
    problem.resolve("works again")
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said == [
        ("WARNING", "namespace x does not exist"),
        ("DEBUG", "namespace x does not exist"),
        ("DEBUG", "namespace x does not exist"),
        ("WARNING", "cannot reach the API server"),
        ("INFO", "works again"),
    ]
