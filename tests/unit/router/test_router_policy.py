"""Routing policy tables: decode choice, prefill path, prefill choice, hashing."""

from __future__ import annotations

import pytest

from tandem.api.v1alpha1 import RoutingPolicy
from tandem.router.policy import (
    DecisionReason,
    PolicyConfig,
    PrefillPath,
    RouteRequest,
    WorkerRole,
    WorkerSnapshot,
    affinity_key,
    choose_decode_worker,
    choose_prefill_path,
    choose_prefill_worker,
    choose_route,
    compute_block_hashes,
    count_prefix_overlap,
)

P, D, B = WorkerRole.PREFILL, WorkerRole.DECODE, WorkerRole.BOTH


def w(key: str, role: WorkerRole = D, **kw: object) -> WorkerSnapshot:
    return WorkerSnapshot(key=key, role=role, **kw)  # type: ignore[arg-type]


def req(tokens: int = 1000, blocks: int = 0, max_tokens: int = 16) -> RouteRequest:
    return RouteRequest(tokens, max_tokens, tuple(range(1, blocks + 1)))


CACHE = PolicyConfig(decode_prefix_cache=True, block_tokens=100)


@pytest.mark.parametrize(
    ("workers", "overlaps", "config", "expected"),
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
            {"b": 10},
            CACHE,
            "b",
            id="full-overlap-beats-one-more-sequence",
        ),
        pytest.param(
            [w("a", active_sequences=1), w("b", active_sequences=4)],
            {"b": 10},
            CACHE,
            "a",
            id="overlap-loses-to-heavy-load",
        ),
        pytest.param(
            [w("a", active_sequences=1), w("b", active_sequences=2)],
            {"b": 10},
            PolicyConfig(),
            "a",
            id="overlap-ignored-without-prefix-cache",
        ),
        pytest.param(
            [w("a", active_sequences=1), w("b", active_sequences=2)],
            {"b": 10},
            PolicyConfig(routing=RoutingPolicy.LEAST_LOADED, decode_prefix_cache=True),
            "a",
            id="least-loaded-ignores-overlap",
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
            [w("a", P), w("b", healthy=False)], {}, PolicyConfig(), None, id="none-available"
        ),
    ],
)
def test_choose_decode_worker(
    workers: list[WorkerSnapshot],
    overlaps: dict[str, int],
    config: PolicyConfig,
    expected: str | None,
) -> None:
    chosen = choose_decode_worker(workers, req(blocks=10), overlaps, config)
    assert (chosen.key if chosen else None) == expected


def test_round_robin_cycles_in_key_order() -> None:
    workers = [w("c"), w("a"), w("b")]
    config = PolicyConfig(routing=RoutingPolicy.ROUND_ROBIN)
    picks = [choose_decode_worker(workers, req(), {}, config, turn=t) for t in range(6)]
    assert [p.key for p in picks if p] == ["a", "b", "c", "a", "b", "c"]


@pytest.mark.parametrize(
    ("workers", "tokens", "overlap", "config", "failed", "expected"),
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
            6,
            PolicyConfig(min_prefill_tokens=512, decode_prefix_cache=True, block_tokens=100),
            set(),
            (PrefillPath.LOCAL, DecisionReason.CACHED_PREFIX),
            id="mostly-cached",
        ),
        pytest.param(
            [w("d"), w("p", P)],
            1000,
            6,
            PolicyConfig(min_prefill_tokens=512),
            set(),
            (PrefillPath.REMOTE, DecisionReason.LONG_PROMPT),
            id="overlap-ignored-without-prefix-cache",
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
            [w("d"), w("p", P, queued_prefill_tokens=10**6), w("q", P)],
            5000,
            0,
            PolicyConfig(prefill_saturation_tokens=10**5),
            set(),
            (PrefillPath.REMOTE, DecisionReason.LONG_PROMPT),
            id="one-unsaturated",
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
    overlap: int,
    config: PolicyConfig,
    failed: set[str],
    expected: tuple[PrefillPath, DecisionReason],
) -> None:
    got = choose_prefill_path(workers, req(tokens), "d", overlap, config, failed_prefill=failed)
    assert got == expected


@pytest.mark.parametrize(
    ("workers", "sticky", "expected"),
    [
        pytest.param(
            [w("a", P, queued_prefill_tokens=900), w("b", P, queued_prefill_tokens=100)],
            None,
            "b",
            id="least-pending-tokens",
        ),
        pytest.param(
            [w("a", P, queued_prefill_tokens=900), w("b", P, queued_prefill_tokens=100)],
            "a",
            "a",
            id="sticky-within-slack",
        ),
        pytest.param(
            [w("a", P, queued_prefill_tokens=20000), w("b", P, queued_prefill_tokens=0)],
            "a",
            "b",
            id="sticky-beyond-slack",
        ),
        pytest.param(
            [w("a", P, healthy=False), w("b", P, queued_prefill_tokens=5000)],
            "a",
            "b",
            id="sticky-unhealthy",
        ),
        pytest.param(
            [w("a", P, queued_prefill_tokens=10**6), w("b", P, queued_prefill_tokens=10)],
            None,
            "b",
            id="saturated-skipped",
        ),
        pytest.param(
            [w("a", P, queued_requests=3), w("b", P, queued_requests=1)],
            None,
            "b",
            id="tie-on-tokens-fewer-requests",
        ),
        pytest.param([w("a", D), w("b", D)], None, None, id="no-prefill-role"),
        pytest.param([w("a", P, queued_prefill_tokens=10**6)], None, None, id="all-saturated"),
    ],
)
def test_choose_prefill_worker(
    workers: list[WorkerSnapshot], sticky: str | None, expected: str | None
) -> None:
    config = PolicyConfig(affinity_slack_tokens=8192, prefill_saturation_tokens=10**5)
    chosen = choose_prefill_worker(workers, sticky, config)
    assert (chosen.key if chosen else None) == expected


def test_choose_prefill_worker_excludes_failed() -> None:
    workers = [w("a", P), w("b", P, queued_prefill_tokens=50)]
    chosen = choose_prefill_worker(workers, None, PolicyConfig(), exclude={"a"})
    assert chosen is not None and chosen.key == "b"


def test_choose_route_remote_and_local() -> None:
    workers = [
        w("d1", active_sequences=2),
        w("d2"),
        w("p1", P),
        w("p2", P, queued_prefill_tokens=9),
    ]
    config = PolicyConfig(min_prefill_tokens=100)
    remote = choose_route(workers, req(500), {}, None, config)
    assert remote is not None
    assert (remote.decode, remote.prefill, remote.path) == ("d2", "p1", PrefillPath.REMOTE)
    local = choose_route(workers, req(50), {}, None, config)
    assert local is not None
    assert (local.decode, local.prefill, local.path) == ("d2", None, PrefillPath.LOCAL)
    assert local.reason is DecisionReason.SHORT_PROMPT


def test_choose_route_skips_failed_workers() -> None:
    workers = [w("d1"), w("d2", active_sequences=5), w("p1", P), w("p2", P)]
    route = choose_route(
        workers,
        req(5000),
        {},
        None,
        PolicyConfig(),
        failed_decode={"d1"},
        failed_prefill={"p1"},
    )
    assert route is not None and (route.decode, route.prefill) == ("d2", "p2")
    assert (
        choose_route(workers, req(), {}, None, PolicyConfig(), failed_decode={"d1", "d2"}) is None
    )


@pytest.mark.parametrize("length", [0, 1, 127, 128, 129, 255, 256, 1000])
def test_block_hashes_cover_full_blocks_only(length: int) -> None:
    tokens = list(range(length))
    assert len(compute_block_hashes(tokens, 128, 100)) == length // 128
    assert len(compute_block_hashes(tokens, 128, 2)) == min(length // 128, 2)


def test_block_hashes_are_prefix_chained() -> None:
    a = [1] * 300
    b = [1] * 200 + [2] * 100
    c = [2] + [1] * 299
    ha, hb, hc = (compute_block_hashes(t, 100, 10) for t in (a, b, c))
    assert ha[:2] == hb[:2] and ha[2] != hb[2]
    # Same later blocks after a different first block never match: the hash is chained.
    assert all(x != y for x, y in zip(ha, hc, strict=True))


@pytest.mark.parametrize(
    ("hashes", "cached", "expected"),
    [((1, 2, 3), {1, 2, 3}, 3), ((1, 2, 3), {1, 3}, 1), ((1, 2, 3), {2, 3}, 0), ((), {1}, 0)],
)
def test_count_prefix_overlap(hashes: tuple[int, ...], cached: set[int], expected: int) -> None:
    assert count_prefix_overlap(hashes, cached) == expected


def test_affinity_key_uses_first_blocks() -> None:
    config = PolicyConfig(affinity_blocks=2)
    assert affinity_key(RouteRequest(10, 1, ()), config) is None
    assert affinity_key(RouteRequest(10, 1, (7,)), config) == 7
    assert affinity_key(RouteRequest(10, 1, (7, 8, 9)), config) == 8
