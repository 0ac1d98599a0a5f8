"""How long the supervisor waits before restarting a process that died (pure).

Like the kubelet's crash-loop back-off: the wait doubles with each crash in a row, up to
a ceiling, and a process that stayed up long enough starts a new streak. Without the
reset a worker that crashed five times in its first hour would wait the full ceiling on
every later, unrelated crash, for the life of the cluster.
"""

from __future__ import annotations

MAX_BACKOFF_S = 30.0
# Up this long counts as healthy; the kubelet uses twice its ceiling too (5 min, 10 min).
STABLE_AFTER_S = 2 * MAX_BACKOFF_S


def crashes_in_a_row(previous: int, ran_s: float) -> int:
    """The streak after a process that ran ``ran_s`` seconds died; ``previous`` is the
    streak its predecessor left (0 for a first start)."""
    return 1 if ran_s >= STABLE_AFTER_S else previous + 1


def restart_delay(crashes: int) -> float:
    """Seconds to wait after the ``crashes``-th crash in a row: 1, 2, 4, ... up to the
    ceiling."""
    return min(MAX_BACKOFF_S, 2.0 ** max(0, crashes - 1))
