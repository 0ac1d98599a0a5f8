"""A problem that persists across retries is logged once, not once per retry.

Loops that retry (leader election every 2 s, watches, the autoscaler every interval) report
what went wrong each time; :class:`RecurringProblem` logs a WARNING when the problem starts
or its text changes, repeats at DEBUG, and logs one INFO line when it clears. Status and
readiness say the rest for as long as it lasts.
"""

from __future__ import annotations

import logging


class RecurringProblem:
    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self.current: str | None = None

    def report(self, message: str, *, level: int = logging.WARNING) -> None:
        """The problem happened (again); logged at ``level`` only if it is new."""
        self._logger.log(logging.DEBUG if message == self.current else level, "%s", message)
        self.current = message

    def resolve(self, message: str) -> None:
        """The operation succeeded; ``message`` is logged if a problem was reported."""
        if self.current is not None:
            self._logger.info("%s", message)
            self.current = None
