"""The KV-routing benchmark's workload generator and the figures it reads back."""

from __future__ import annotations

import itertools

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from tandem_dev.bench.chat_workload import (
    add_counts,
    build_chat_workload,
    build_tool_chat_workload,
    compute_replica,
    interleave_turns,
    sum_samples,
    summarize_ttft,
)


def test_the_workload_is_shaped_as_asked_and_repeats_for_a_seed() -> None:
    workload = build_chat_workload(4, 3, rules=10, seed=7)
    assert len(workload.conversations) == 4
    assert all(len(turns) == 3 for turns in workload.conversations)
    assert workload.system.count("\nRule ") == 10
    assert build_chat_workload(4, 3, rules=10, seed=7) == workload
    other = build_chat_workload(4, 3, rules=10, seed=8)
    assert other.system != workload.system and other.conversations != workload.conversations


def test_every_user_message_is_distinct_and_names_its_customer_and_turn() -> None:
    workload = build_chat_workload(5, 4, seed=1)
    messages = [m for turns in workload.conversations for m in turns]
    assert len(set(messages)) == len(messages) == 20
    assert workload.conversations[2][3].startswith("Customer 3, message 4:")


def test_a_workload_needs_a_chat_a_turn_and_a_rule() -> None:
    for args in ((0, 3, 5), (2, 0, 5), (2, 3, 0)):
        with pytest.raises(ValueError, match="at least 1"):
            build_chat_workload(args[0], args[1], rules=args[2])


def test_tool_chats_carry_a_distinct_tool_output_after_each_desk_message() -> None:
    desk = build_chat_workload(3, 2, rules=5, seed=4)
    tools = build_tool_chat_workload(3, 2, rules=5, log_lines=4, seed=4)
    assert tools.system == desk.system
    assert build_tool_chat_workload(3, 2, rules=5, log_lines=4, seed=4) == tools
    for asked, sent in zip(desk.conversations, tools.conversations, strict=True):
        for question, message in zip(asked, sent, strict=True):
            head, log = message.split("\nOutput of the diagnostics tool:\n")
            assert head == question
            assert len(log.splitlines()) == 4
    logs = [m.split("tool:\n")[1] for turns in tools.conversations for m in turns]
    assert len(set(logs)) == len(logs) == 6


def test_turns_are_sent_round_by_round_each_chat_in_its_order() -> None:
    order = interleave_turns(3, 2)
    assert order == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]
    for chat in range(3):  # a chat's turns keep their order
        turns = [t for c, t in order if c == chat]
        assert turns == sorted(turns) == [0, 1]


def test_consecutive_turns_reach_different_replicas_when_there_are_several() -> None:
    for chat in range(4):
        assert [compute_replica(chat, t, 1) for t in range(3)] == [0, 0, 0]
        replicas = [compute_replica(chat, t, 2) for t in range(4)]
        assert all(a != b for a, b in itertools.pairwise(replicas))
    # Chats start on different replicas, so the load is spread from the first turn.
    assert {compute_replica(chat, 0, 2) for chat in range(4)} == {0, 1}


def exposition() -> str:
    """Counters named as the workers and routers name theirs, as prometheus_client
    exposes them."""
    registry = CollectorRegistry()
    tokens = Counter("tandem_worker_prompt_tokens", "By source.", ["source"], registry=registry)
    tokens.labels("cache").inc(960)
    tokens.labels("computed").inc(67)
    Counter("tandem_router_kv_transfer_bytes", "Moved.", registry=registry).inc(1048576)
    decisions = Counter(
        "tandem_router_prefill_decisions", "Decisions.", ["path", "reason"], registry=registry
    )
    decisions.labels("local", "cached_prefix").inc(3)
    decisions.labels("local", "short_prompt").inc(2)
    decisions.labels("remote", "long_prompt").inc(4)
    return generate_latest(registry).decode()


def test_samples_are_summed_by_label_and_across_processes() -> None:
    metrics = exposition()
    tokens = sum_samples(metrics, "tandem_worker_prompt_tokens_total", "source")
    assert tokens == {"cache": 960.0, "computed": 67.0}
    paths = sum_samples(metrics, "tandem_router_prefill_decisions_total", "path")
    assert paths == {"local": 5.0, "remote": 4.0}
    assert sum_samples(metrics, "tandem_router_kv_transfer_bytes_total") == {"": 1048576.0}
    assert sum_samples(metrics, "tandem_router_retries_total", "path") == {}
    assert add_counts([tokens, {"computed": 3.0, "other": 1.0}]) == {
        "cache": 960.0,
        "computed": 70.0,
        "other": 1.0,
    }


def test_ttft_is_summarized_as_p50_and_p90() -> None:
    samples = [float(s) for s in range(1, 11)]  # 1..10 s
    p50, p90 = summarize_ttft(samples)
    assert 5.0 <= p50 <= 6.0 and 9.0 <= p90 <= 10.0
    assert summarize_ttft([2.5]) == (2.5, 2.5)
    with pytest.raises(ValueError):
        summarize_ttft([])
