"""Routing policy tables: decode choice, prefill path, prefill choice (cached tokens
against load)."""

from __future__ import annotations

import pytest

from tandem.api.v1alpha1 import RoutingPolicy
from tandem.router.policy import (
    DecisionReason,
    PolicyConfig,
    PrefillPath,
    RouteDecision,
    RouteRequest,
    WorkerRole,
    WorkerSnapshot,
    choose_decode_worker,
    choose_prefill_path,
    choose_prefill_worker,
    choose_route,
)

P, D, B = WorkerRole.PREFILL, WorkerRole.DECODE, WorkerRole.BOTH


def w(key: str, role: WorkerRole = D, **kw: object) -> WorkerSnapshot:
    return WorkerSnapshot(key=key, role=role, **kw)  # type: ignore[arg-type]


def req(tokens: int = 1000, max_tokens: int = 16) -> RouteRequest:
    return RouteRequest(tokens, max_tokens)


@pytest.mark.parametrize(
    ("workers", "cached", "config", "expected"),
    [
        pytest.param(
            [w("a", active_sequences=3), w("b", active_sequences=1)],
            {},
            PolicyConfig(),
            "b",
            id="least-active",
        ),
        pytest.param(
            [w("a", queued_requests=2), w("b", active_sequences=1)],
            {},
            PolicyConfig(),
            "b",
            id="queued-counts-as-load",
        ),
        pytest.param(
            [w("a", active_sequences=1), w("b", active_sequences=2)],
            {"b": 1000},
            PolicyConfig(),
            "b",
            id="fully-cached-beats-one-more-sequence",
        ),
        pytest.param(
            [w("a", active_sequences=1), w("b", active_sequences=4)],
            {"b": 1000},
            PolicyConfig(),
            "a",
            id="cache-loses-to-heavy-load",
        ),
        pytest.param(
            [w("a", active_sequences=1), w("b", active_sequences=2)],
            {"b": 400},
            PolicyConfig(),
            "a",
            id="partly-cached-is-worth-less",
        ),
        pytest.param(
            [w("a", active_sequences=1), w("b", active_sequences=2)],
            {"b": 1000},
            PolicyConfig(routing=RoutingPolicy.LEAST_LOADED),
            "a",
            id="least-loaded-ignores-the-cache",
        ),
        pytest.param(
            [w("a", healthy=False), w("b", active_sequences=9)],
            {},
            PolicyConfig(),
            "b",
            id="skips-unhealthy",
        ),
        pytest.param(
            [w("a", draining=True), w("b", active_sequences=9)],
            {},
            PolicyConfig(),
            "b",
            id="skips-draining",
        ),
        pytest.param(
            [w("a", P), w("b", B, active_sequences=5)],
            {},
            PolicyConfig(),
            "b",
            id="both-role-decodes-prefill-role-does-not",
        ),
        pytest.param(
            [
                w("a", kv_blocks_total=100, kv_blocks_free=1, kv_block_size=16),
                w(
                    "b",
                    active_sequences=5,
                    kv_blocks_total=100,
                    kv_blocks_free=100,
                    kv_block_size=16,
                ),
            ],
            {},
            PolicyConfig(),
            "b",
            id="kv-shortage-penalised",
        ),
        pytest.param(
            [
                w("a", kv_blocks_total=100, kv_blocks_free=2, kv_block_size=16),
                w("b", active_sequences=1, kv_blocks_total=100, kv_blocks_free=100),
            ],
            {"a": 1000},
            PolicyConfig(),
            "a",
            id="cached-prompt-needs-no-new-blocks",
        ),
        pytest.param(
            [w("a", P), w("b", healthy=False)], {}, PolicyConfig(), None, id="none-available"
        ),
    ],
)
def test_choose_decode_worker(
    workers: list[WorkerSnapshot],
    cached: dict[str, int],
    config: PolicyConfig,
    expected: str | None,
) -> None:
    chosen = choose_decode_worker(workers, req(1000, max_tokens=8), cached, config)
    assert (chosen.key if chosen else None) == expected


def test_round_robin_cycles_in_key_order() -> None:
    workers = [w("c"), w("a"), w("b")]
    config = PolicyConfig(routing=RoutingPolicy.ROUND_ROBIN)
    picks = [choose_decode_worker(workers, req(), {}, config, turn=t) for t in range(6)]
    assert [p.key for p in picks if p] == ["a", "b", "c", "a", "b", "c"]


@pytest.mark.parametrize(
    ("workers", "tokens", "cached", "config", "failed", "expected"),
    [
        pytest.param(
            [w("d")],
            5000,
            0,
            PolicyConfig(),
            set(),
            (PrefillPath.LOCAL, DecisionReason.NO_PREFILL_WORKERS),
            id="no-pool",
        ),
        pytest.param(
            [w("d"), w("p", P)],
            100,
            0,
            PolicyConfig(min_prefill_tokens=512),
            set(),
            (PrefillPath.LOCAL, DecisionReason.SHORT_PROMPT),
            id="short",
        ),
        pytest.param(
            [w("d")],
            100,
            0,
            PolicyConfig(min_prefill_tokens=512),
            set(),
            (PrefillPath.LOCAL, DecisionReason.SHORT_PROMPT),
            id="short-with-the-pool-at-zero-is-no-demand-for-it",
        ),
        pytest.param(
            [w("d"), w("p", P)],
            512,
            0,
            PolicyConfig(min_prefill_tokens=512),
            set(),
            (PrefillPath.REMOTE, DecisionReason.LONG_PROMPT),
            id="at-threshold-remote",
        ),
        pytest.param(
            [w("d"), w("p", P)],
            511,
            0,
            PolicyConfig(min_prefill_tokens=512),
            set(),
            (PrefillPath.LOCAL, DecisionReason.SHORT_PROMPT),
            id="below-threshold",
        ),
        pytest.param(
            [w("d"), w("p", P)],
            1000,
            600,
            PolicyConfig(min_prefill_tokens=512),
            set(),
            (PrefillPath.LOCAL, DecisionReason.CACHED_PREFIX),
            id="mostly-cached",
        ),
        pytest.param(
            [w("d"), w("p", P)],
            1000,
            400,
            PolicyConfig(min_prefill_tokens=512),
            set(),
            (PrefillPath.REMOTE, DecisionReason.LONG_PROMPT),
            id="partly-cached-still-remote",
        ),
        pytest.param(
            [w("d"), w("p", P)],
            1000,
            600,
            PolicyConfig(min_prefill_tokens=512, routing=RoutingPolicy.ROUND_ROBIN),
            set(),
            (PrefillPath.REMOTE, DecisionReason.LONG_PROMPT),
            id="cache-ignored-unless-kv-aware",
        ),
        pytest.param(
            [w("d", config_digest="m1"), w("p", P, config_digest="m2")],
            5000,
            0,
            PolicyConfig(),
            set(),
            (PrefillPath.LOCAL, DecisionReason.PREFILL_INCOMPATIBLE),
            id="other-model-in-the-pool",
        ),
        pytest.param(
            [w("d", config_digest="m1"), w("p", P)],
            5000,
            0,
            PolicyConfig(),
            set(),
            (PrefillPath.REMOTE, DecisionReason.LONG_PROMPT),
            id="unknown-digest-is-not-held-against-a-worker",
        ),
        pytest.param(
            [w("d"), w("p", P, healthy=False)],
            5000,
            0,
            PolicyConfig(),
            set(),
            (PrefillPath.LOCAL, DecisionReason.PREFILL_UNHEALTHY),
            id="unhealthy",
        ),
        pytest.param(
            [w("d"), w("p", P, queued_prefill_tokens=10**6)],
            5000,
            0,
            PolicyConfig(prefill_saturation_tokens=10**5),
            set(),
            (PrefillPath.LOCAL, DecisionReason.PREFILL_SATURATED),
            id="saturated",
        ),
        pytest.param(
            [w("d", active_sequences=1), w("p", P, queued_prefill_tokens=10**6)],
            5000,
            0,
            PolicyConfig(prefill_saturation_tokens=10**5),
            set(),
            (PrefillPath.REMOTE, DecisionReason.DECODE_BUSY),
            id="saturated-but-a-local-prefill-would-stall-a-stream",
        ),
        pytest.param(
            [
                w("d", queued_requests=1, queued_prefill_tokens=5000),
                w("p", P, queued_prefill_tokens=10**6),
            ],
            5000,
            0,
            PolicyConfig(prefill_saturation_tokens=10**5),
            set(),
            (PrefillPath.REMOTE, DecisionReason.DECODE_BUSY),
            id="saturated-but-the-decode-worker-has-a-local-prefill-pending",
        ),
        # Only awaiting remotely prefilled KV: the decode worker still prefills locally,
        # capacity a short prefill pool needs.
        pytest.param(
            [w("d", queued_requests=1), w("p", P, queued_prefill_tokens=10**6)],
            5000,
            0,
            PolicyConfig(prefill_saturation_tokens=10**5),
            set(),
            (PrefillPath.LOCAL, DecisionReason.PREFILL_SATURATED),
            id="saturated-and-the-decode-worker-only-awaits-remote-kv",
        ),
        pytest.param(
            [w("d"), w("p", P, queued_prefill_tokens=10**6), w("q", P)],
            5000,
            0,
            PolicyConfig(prefill_saturation_tokens=10**5),
            set(),
            (PrefillPath.REMOTE, DecisionReason.LONG_PROMPT),
            id="one-unsaturated",
        ),
        # With a wait limit and a measured rate, time decides: (queued + own) / rate.
        pytest.param(
            [w("d"), w("p", P, queued_prefill_tokens=30000, prefill_tokens_per_second=1e4)],
            5000,
            0,
            PolicyConfig(prefill_saturation_tokens=10**6, max_prefill_wait_seconds=3.0),
            set(),
            (PrefillPath.LOCAL, DecisionReason.PREFILL_SATURATED),
            id="would-wait-3.5s-over-a-3s-limit",
        ),
        pytest.param(
            [w("d"), w("p", P, queued_prefill_tokens=20000, prefill_tokens_per_second=1e4)],
            5000,
            0,
            PolicyConfig(prefill_saturation_tokens=10**4, max_prefill_wait_seconds=3.0),
            set(),
            (PrefillPath.REMOTE, DecisionReason.LONG_PROMPT),
            id="2.5s-within-the-limit-beats-the-token-threshold",
        ),
        pytest.param(
            [w("d"), w("p", P, queued_prefill_tokens=10**6)],
            5000,
            0,
            PolicyConfig(prefill_saturation_tokens=10**5, max_prefill_wait_seconds=3.0),
            set(),
            (PrefillPath.LOCAL, DecisionReason.PREFILL_SATURATED),
            id="rate-unknown-falls-back-to-tokens",
        ),
        pytest.param(
            [w("d"), w("p", P, queued_prefill_tokens=20000, prefill_tokens_per_second=1e6)],
            5000,
            0,
            PolicyConfig(prefill_saturation_tokens=10**4),
            set(),
            (PrefillPath.LOCAL, DecisionReason.PREFILL_SATURATED),
            id="no-limit-tokens-decide-whatever-the-rate",
        ),
        pytest.param(
            [w("d"), w("p", P)],
            5000,
            0,
            PolicyConfig(),
            {"p"},
            (PrefillPath.LOCAL, DecisionReason.PREFILL_FAILED),
            id="all-failed",
        ),
        pytest.param(
            [w("d", B)],
            5000,
            0,
            PolicyConfig(),
            set(),
            (PrefillPath.LOCAL, DecisionReason.NO_PREFILL_WORKERS),
            id="both-worker-never-prefills-for-itself",
        ),
        pytest.param(
            [w("d"), w("p", P)],
            0,
            0,
            PolicyConfig(min_prefill_tokens=0),
            set(),
            (PrefillPath.REMOTE, DecisionReason.LONG_PROMPT),
            id="threshold-zero",
        ),
    ],
)
def test_choose_prefill_path(
    workers: list[WorkerSnapshot],
    tokens: int,
    cached: int,
    config: PolicyConfig,
    failed: set[str],
    expected: tuple[PrefillPath, DecisionReason],
) -> None:
    decode = next(x for x in workers if x.key == "d")
    got = choose_prefill_path(workers, req(tokens), decode, cached, config, failed_prefill=failed)
    assert got == expected


# Waiting for a starting prefill worker: a 5000-token prompt, the limit 10 s, one worker
# starting unless a case says otherwise.
WAITS = PolicyConfig(max_prefill_start_wait_seconds=10.0)
BUSY = w("d", active_sequences=1)


@pytest.mark.parametrize(
    ("workers", "cached", "config", "starting", "waited", "expected"),
    [
        pytest.param(
            [BUSY], 0, WAITS, 1, 0.0,
            (PrefillPath.WAIT, DecisionReason.PREFILL_STARTING),
            id="pool-empty-one-starting-decode-streams",
        ),
        pytest.param(
            [BUSY], 0, WAITS, 1, 9.9,
            (PrefillPath.WAIT, DecisionReason.PREFILL_STARTING),
            id="still-within-the-limit",
        ),
        pytest.param(
            [BUSY], 0, WAITS, 1, 10.0,
            (PrefillPath.LOCAL, DecisionReason.NO_PREFILL_WORKERS),
            id="limit-passed",
        ),
        pytest.param(
            [w("d", queued_prefill_tokens=5000)], 0, WAITS, 1, 0.0,
            (PrefillPath.WAIT, DecisionReason.PREFILL_STARTING),
            id="decode-worker-has-a-local-prefill-pending",
        ),
        pytest.param(
            [w("d")], 0, WAITS, 1, 0.0,
            (PrefillPath.LOCAL, DecisionReason.NO_PREFILL_WORKERS),
            id="idle-decode-worker-prefills-at-once",
        ),
        pytest.param(
            [BUSY], 0, PolicyConfig(), 1, 0.0,
            (PrefillPath.LOCAL, DecisionReason.NO_PREFILL_WORKERS),
            id="no-limit-never-waits",
        ),
        pytest.param(
            [BUSY], 0, WAITS, 0, 0.0,
            (PrefillPath.LOCAL, DecisionReason.NO_PREFILL_WORKERS),
            id="nothing-starting",
        ),
        pytest.param(
            [BUSY, w("p", P, healthy=False)], 0, WAITS, 1, 0.0,
            (PrefillPath.WAIT, DecisionReason.PREFILL_STARTING),
            id="pool-unhealthy-one-starting",
        ),
        pytest.param(
            [BUSY, w("p", P)], 0, WAITS, 1, 0.0,
            (PrefillPath.REMOTE, DecisionReason.LONG_PROMPT),
            id="a-ready-worker-takes-it",
        ),
        pytest.param(
            [BUSY], 4600, WAITS, 1, 0.0,
            (PrefillPath.LOCAL, DecisionReason.NO_PREFILL_WORKERS),
            id="mostly-cached-on-the-decode-worker",
        ),
    ],
)  # fmt: skip
def test_a_long_prompt_waits_for_a_starting_prefill_worker_only_while_it_pays(
    workers: list[WorkerSnapshot],
    cached: int,
    config: PolicyConfig,
    starting: int,
    waited: float,
    expected: tuple[PrefillPath, DecisionReason],
) -> None:
    got = choose_prefill_path(
        workers, req(5000), workers[0], cached, config, prefill_starting=starting,
        waited_seconds=waited,
    )  # fmt: skip
    assert got == expected


def test_a_waiting_route_names_no_prefill_worker() -> None:
    route = choose_route([BUSY], req(5000), {}, WAITS, prefill_starting=1, waited_seconds=1.0)
    assert route == RouteDecision("d", None, PrefillPath.WAIT, DecisionReason.PREFILL_STARTING)


@pytest.mark.parametrize(
    ("workers", "cached", "config", "expected"),
    [
        pytest.param(
            [w("a", P, queued_prefill_tokens=900), w("b", P, queued_prefill_tokens=100)],
            {},
            PolicyConfig(),
            "b",
            id="least-pending-tokens",
        ),
        pytest.param(
            [w("a", P, queued_prefill_tokens=900), w("b", P, queued_prefill_tokens=100)],
            {"a": 1000},
            PolicyConfig(),
            "a",
            id="cached-prompt-beats-a-shorter-queue",
        ),
        pytest.param(
            [w("a", P, queued_prefill_tokens=2000), w("b", P, queued_prefill_tokens=100)],
            {"a": 1000},
            PolicyConfig(),
            "b",
            id="cache-loses-to-a-long-queue",
        ),
        pytest.param(
            [w("a", P, queued_prefill_tokens=900), w("b", P, queued_prefill_tokens=100)],
            {"a": 1000},
            PolicyConfig(routing=RoutingPolicy.LEAST_LOADED),
            "b",
            id="least-loaded-ignores-the-cache",
        ),
        pytest.param(
            [w("a", P, healthy=False), w("b", P, queued_prefill_tokens=5000)],
            {"a": 1000},
            PolicyConfig(),
            "b",
            id="unhealthy-skipped",
        ),
        pytest.param(
            [w("a", P, queued_prefill_tokens=10**6), w("b", P, queued_prefill_tokens=10)],
            {},
            PolicyConfig(prefill_saturation_tokens=10**5),
            "b",
            id="saturated-skipped",
        ),
        pytest.param(
            [
                w("a", P, queued_prefill_tokens=20000, prefill_tokens_per_second=5000),
                w("b", P, queued_prefill_tokens=25000, prefill_tokens_per_second=10**5),
            ],
            {},
            PolicyConfig(max_prefill_wait_seconds=3.0),
            "b",
            id="slow-worker-over-the-wait-limit-skipped",  # a: 4.2 s, b: 0.26 s
        ),
        pytest.param(
            [w("a", P, queued_requests=3), w("b", P, queued_requests=1)],
            {},
            PolicyConfig(),
            "b",
            id="tie-on-tokens-fewer-requests",
        ),
        pytest.param(
            [w("a", P, config_digest="m2"), w("b", P, queued_prefill_tokens=10**4)],
            {"a": 1000},
            PolicyConfig(),
            "b",
            id="other-model-skipped",
        ),
        pytest.param([w("a", D), w("b", D)], {}, PolicyConfig(), None, id="no-prefill-role"),
        pytest.param(
            [w("a", P, queued_prefill_tokens=10**6)],
            {},
            PolicyConfig(prefill_saturation_tokens=10**5),
            None,
            id="all-saturated",
        ),
    ],
)
def test_choose_prefill_worker(
    workers: list[WorkerSnapshot],
    cached: dict[str, int],
    config: PolicyConfig,
    expected: str | None,
) -> None:
    chosen = choose_prefill_worker(workers, req(1000), cached, config, decode_digest="m1")
    assert (chosen.key if chosen else None) == expected


def test_choose_prefill_worker_excludes_failed() -> None:
    workers = [w("a", P), w("b", P, queued_prefill_tokens=50)]
    chosen = choose_prefill_worker(workers, req(), {}, PolicyConfig(), exclude={"a"})
    assert chosen is not None and chosen.key == "b"


def test_choose_route_remote_and_local() -> None:
    workers = [
        w("d1", active_sequences=2),
        w("d2"),
        w("p1", P),
        w("p2", P, queued_prefill_tokens=9),
    ]
    config = PolicyConfig(min_prefill_tokens=100)
    remote = choose_route(workers, req(500), {}, config)
    assert remote is not None
    assert (remote.decode, remote.prefill, remote.path) == ("d2", "p1", PrefillPath.REMOTE)
    local = choose_route(workers, req(50), {}, config)
    assert local is not None
    assert (local.decode, local.prefill, local.path) == ("d2", None, PrefillPath.LOCAL)
    assert local.reason is DecisionReason.SHORT_PROMPT


def test_a_busy_decode_worker_queues_on_the_prefill_worker_that_finishes_first() -> None:
    workers = [
        w("d", active_sequences=3),
        w("p1", P, queued_prefill_tokens=300_000),
        w("p2", P, queued_prefill_tokens=200_000),
    ]
    route = choose_route(workers, req(5000), {}, PolicyConfig(prefill_saturation_tokens=10**5))
    assert route == RouteDecision("d", "p2", PrefillPath.REMOTE, DecisionReason.DECODE_BUSY)


def test_choose_route_skips_failed_workers() -> None:
    workers = [w("d1"), w("d2", active_sequences=5), w("p1", P), w("p2", P)]
    route = choose_route(
        workers,
        req(5000),
        {},
        PolicyConfig(),
        failed_decode={"d1"},
        failed_prefill={"p1"},
    )
    assert route is not None and (route.decode, route.prefill) == ("d2", "p2")
    assert choose_route(workers, req(), {}, PolicyConfig(), failed_decode={"d1", "d2"}) is None


def test_choose_route_sends_a_prompt_to_the_workers_that_cache_it() -> None:
    workers = [
        w("d1"),
        w("d2", active_sequences=1),
        w("p1", P),
        w("p2", P, queued_prefill_tokens=300),
    ]
    config = PolicyConfig(min_prefill_tokens=512)
    remote = choose_route(workers, req(5000), {"d2": 4000, "p2": 4000}, config)
    assert remote is not None and (remote.decode, remote.prefill) == ("d2", "p2")
    local = choose_route(workers, req(1200), {"d2": 1024}, config)
    assert local is not None and (local.decode, local.prefill) == ("d2", None)
    assert local.reason is DecisionReason.CACHED_PREFIX
