"""The KV benchmarks' chat workloads and the figures they read back (pure functions).

A support desk: one long system prompt (numbered house rules, the same for every chat)
and several customers, each asking a few questions in one conversation. Text is
generated from a seed, so every routing policy is measured on the same chats; the
answers come from the model at run time (greedy, so they repeat as well). The KV-offload
benchmark's desk is an agent: each question arrives with a diagnostics tool's output,
which the conversation keeps, so its history grows by a tool output every turn.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from tandem_dev.bench.http_load import percentile

_PRODUCTS = (
    "router", "thermostat", "doorbell", "speaker", "camera", "charger", "lamp", "scale",
    "kettle", "printer", "headset", "monitor", "keyboard", "tablet", "watch", "drone",
)  # fmt: skip
_PARTS = (
    "battery", "firmware", "screen", "cable", "antenna", "button", "sensor", "speaker",
    "warranty", "invoice", "account", "subscription", "app", "mount", "fan", "adapter",
)  # fmt: skip
_ACTIONS = (
    "check the serial number", "ask for the order date", "offer a replacement",
    "explain the return window", "suggest a factory reset", "open a repair ticket",
    "confirm the shipping address", "escalate to a specialist", "send the manual",
    "apply the loyalty discount", "verify the account email", "schedule a callback",
)  # fmt: skip
_SYMPTOMS = (
    "stopped charging", "keeps restarting", "shows a red light", "lost its settings",
    "makes a clicking noise", "will not pair", "drains too fast", "runs hot",
    "shows the wrong time", "disconnects every hour", "cannot update", "is very slow",
)  # fmt: skip

_EVENTS = (
    "reading out of range", "retry", "timeout", "checksum mismatch", "reconnect",
    "voltage drop", "temperature warning", "watchdog reset", "queue full", "link down",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ChatWorkload:
    system: str
    conversations: tuple[tuple[str, ...], ...]  # each conversation's user turns, in order


def build_chat_workload(
    conversations: int, turns: int, *, rules: int = 40, seed: int = 0
) -> ChatWorkload:
    """``conversations`` chats of ``turns`` user messages each, all behind one system
    prompt of ``rules`` house rules (about 30 SmolLM2 tokens per rule). Every user
    message is distinct."""
    if conversations < 1 or turns < 1 or rules < 1:
        raise ValueError("conversations, turns and rules must be at least 1")
    rng = random.Random(seed)
    lines = [
        "You are the support assistant of Tandem Devices. Answer in one or two short "
        "sentences and follow the house rules below."
    ]
    for number in range(1, rules + 1):
        lines.append(
            f"Rule {number}: when a customer's {rng.choice(_PRODUCTS)} has a problem with "
            f"its {rng.choice(_PARTS)}, first {rng.choice(_ACTIONS)}, then "
            f"{rng.choice(_ACTIONS)}."
        )
    chats = []
    for customer in range(1, conversations + 1):
        product = rng.choice(_PRODUCTS)
        chats.append(
            tuple(
                f"Customer {customer}, message {turn}: my {product}'s "
                f"{rng.choice(_PARTS)} {rng.choice(_SYMPTOMS)} since I changed the "
                f"{rng.choice(_PARTS)}. Which rule applies, and what should I do "
                f"about the {rng.choice(_PARTS)}?"
                for turn in range(1, turns + 1)
            )
        )
    return ChatWorkload("\n".join(lines), tuple(chats))


def build_tool_chat_workload(
    conversations: int, turns: int, *, rules: int = 40, log_lines: int = 12, seed: int = 0
) -> ChatWorkload:
    """``build_chat_workload``'s chats, each user message followed by a diagnostics
    tool's output of ``log_lines`` log lines (about 25 SmolLM2 tokens each). Every log
    is distinct."""
    desk = build_chat_workload(conversations, turns, rules=rules, seed=seed)
    rng = random.Random(f"tool output {seed}")
    chats = []
    for messages in desk.conversations:
        chats.append(
            tuple(
                f"{message}\nOutput of the diagnostics tool:\n"
                + "\n".join(
                    f"{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d} "
                    f"{rng.choice(_PARTS)}: {rng.choice(_EVENTS)}, code "
                    f"{rng.randrange(100, 1000)}, attempt {rng.randrange(1, 10)}"
                    for _ in range(log_lines)
                )
                for message in messages
            )
        )
    return ChatWorkload(desk.system, tuple(chats))


def interleave_turns(conversations: int, turns: int) -> list[tuple[int, int]]:
    """(conversation, turn) in the order they are sent: every chat's first turn, then
    every chat's second, ... -- each chat's history waits in the caches while the
    others take their turn, as at a desk serving several customers."""
    return [(chat, turn) for turn in range(turns) for chat in range(conversations)]


def compute_replica(conversation: int, turn: int, replicas: int) -> int:
    """The frontend replica a turn reaches when a load balancer spreads requests
    without session affinity: consecutive turns of a chat land on different replicas."""
    return (conversation + turn) % replicas


def sum_samples(metrics_text: str, sample: str, label: str | None = None) -> dict[str, float]:
    """Prometheus text: the values of ``sample`` summed by ``label``'s value (all of
    them under "" when ``label`` is None)."""
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        for s in family.samples:
            if s.name != sample or (label is not None and label not in s.labels):
                continue
            key = "" if label is None else s.labels[label]
            sums[key] = sums.get(key, 0.0) + s.value
    return sums


def add_counts(counts: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Several processes' ``sum_samples`` added together."""
    total: dict[str, float] = {}
    for one in counts:
        for key, value in one.items():
            total[key] = total.get(key, 0.0) + value
    return total


def summarize_ttft(seconds: Sequence[float]) -> tuple[float, float]:
    """(p50, p90) of time-to-first-token samples."""
    if not seconds:
        raise ValueError("no samples")
    return percentile(seconds, 0.5), percentile(seconds, 0.9)
