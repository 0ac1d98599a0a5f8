"""Deciding before the interval is up (pure): when long prompts are being diverted.

A round every interval sees a burst up to an interval after it starts. Meanwhile the
router prefills the long prompts the prefill pool cannot take (none there, or every
worker past the wait limit) on decode workers, and each such prefill stalls every
sequence that decode worker is streaming for as long as it runs: a 32k prompt on a
GB200 worker costs ~0.3 s, more than the ITL budget of a 64-token answer. So the
actuator also reads the router's count of such prompts
(``tandem_router_diverted_prompts_total``) between its rounds, and decides at once when
it grew since the last round (Knative's activator likewise wakes its autoscaler on the
first request for a revision at zero):

- with the prefill pool at zero, at the first diverted prompt: the pool needs a worker
  whatever the rate turns out to be;
- otherwise once half an interval has passed since the last round, so the arrival rate
  the decision sizes the pool from covers at least that long (a round just after a
  burst began sees a fraction of it);
- never at the pool's maximum: there is nothing to decide.

The same holds for a decode pool at zero: a request that finds no decode worker waits
for one (``tandem_router_requests_waiting_for_worker``), and every second before the
round adds a second to its first token; the actuator reads that gauge between rounds
while the pool is empty and decides at once when it is not zero.

The early round is a whole round (both pools, the usual policy); the next one follows
an interval after it.
"""

from __future__ import annotations

from tandem.autoscale.signals import compute_counter_delta

# How often the actuator reads the counter between rounds.
POLL_SECONDS = 1.0


def may_decide_early(
    current: int, max_replicas: int, seconds_since_round: float, interval_seconds: float
) -> bool:
    """Whether an early round could happen now for a prefill pool of ``current`` workers
    (if false, the actuator need not read the counter)."""
    if current >= max_replicas:
        return False
    return current == 0 or seconds_since_round >= interval_seconds / 2


def may_wake_from_zero(current: int, max_replicas: int) -> bool:
    """Whether an early round could happen now for a decode pool of ``current`` workers
    (if false, the actuator need not read the waiting requests)."""
    return current == 0 < max_replicas


def requests_waiting(waiting: float | None) -> bool:
    """Whether requests wait for a decode worker; unknown (a frontend did not answer, or
    exports no such gauge) is no."""
    return waiting is not None and waiting > 0


def prompts_diverted_since(at_round: float | None, latest: float | None) -> bool:
    """Whether the diverted-prompts counter grew since the last round read it; unknown
    (not exported, or reset by a frontend restart) is no."""
    grown = compute_counter_delta(latest, at_round)
    return grown is not None and grown > 0
