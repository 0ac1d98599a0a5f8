"""choose_victims and pod-deletion costs: idle and not-ready first, never busy over idle."""

from __future__ import annotations

import itertools

import pytest

from tandem.autoscale.drain import WorkerLoad, choose_victims, compute_pod_deletion_costs

POOL = [
    WorkerLoad("busy-a", active_sequences=12, queued_requests=1, queued_tokens=4096),
    WorkerLoad("idle-b"),
    WorkerLoad("light-c", active_sequences=2),
    WorkerLoad("starting-d", ready=False),
    WorkerLoad("draining-e", draining=True),
    WorkerLoad("idle-a"),
    WorkerLoad("prefilling-f", queued_requests=1, queued_tokens=32768),
    WorkerLoad("prefilling-g", queued_requests=1, queued_tokens=1024),
]


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        (0, []),
        (1, ["starting-d"]),
        (3, ["starting-d", "idle-a", "idle-b"]),
        (4, ["starting-d", "idle-a", "idle-b", "prefilling-g"]),
        (5, ["starting-d", "idle-a", "idle-b", "prefilling-g", "prefilling-f"]),
        (6, ["starting-d", "idle-a", "idle-b", "prefilling-g", "prefilling-f", "light-c"]),
        (
            20,
            ["starting-d", "idle-a", "idle-b", "prefilling-g", "prefilling-f", "light-c", "busy-a"],
        ),
    ],
)
def test_victims_in_order(count: int, expected: list[str]) -> None:
    assert choose_victims(POOL, count) == expected


def test_never_a_busy_worker_while_an_idle_one_is_left() -> None:
    for pool in itertools.permutations(POOL[:4]):
        for count in range(1, 5):
            chosen = {w.key for w in pool if w.key in choose_victims(pool, count)}
            kept = [w for w in pool if w.key not in chosen and not w.draining]
            chosen_loads = [w for w in pool if w.key in chosen]
            if any(w.idle for w in kept):
                assert all(w.idle or not w.ready for w in chosen_loads)


def test_order_does_not_depend_on_input_order() -> None:
    choices = {tuple(choose_victims(list(p), 3)) for p in itertools.permutations(POOL[:5])}
    assert len(choices) == 1


def test_deletion_costs_agree_with_the_victim_order() -> None:
    costs = compute_pod_deletion_costs(POOL)
    assert costs["starting-d"] == 0
    assert costs["idle-b"] == 0
    assert costs["prefilling-g"] < costs["prefilling-f"] < costs["light-c"] < costs["busy-a"]
    assert all(0 <= c <= 2_147_483_647 for c in costs.values())


def test_deletion_cost_saturates_at_int32() -> None:
    huge = WorkerLoad("x", active_sequences=10_000)
    assert compute_pod_deletion_costs([huge])["x"] == 2_147_483_647
