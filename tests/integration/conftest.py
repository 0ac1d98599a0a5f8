"""Shared by the integration tests that SIGKILL a worker while requests stream in."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

_DECISION = re.compile(
    r'^tandem_router_prefill_decisions_total\{path="(\w+)",reason="(\w+)"\} (\S+)$',
    flags=re.MULTILINE,
)


@dataclass
class KillOutcome:
    """What the clients saw, and the router's prefill decisions afterwards."""

    statuses: list[int] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)  # seconds, one per request
    decisions: dict[str, float] = field(default_factory=dict)  # "path/reason" -> count


def _decision_counts(base: str) -> dict[str, float]:
    """``tandem_router_prefill_decisions_total`` from the frontend at ``base`` (no /v1)."""
    text = httpx.get(f"{base}/metrics").text
    return {f"{path}/{reason}": float(v) for path, reason, v in _DECISION.findall(text)}


def _kill_mid_traffic(
    endpoint: str,
    pid: int,
    *,
    total: int,
    concurrency: int,
    kill_after: int,
    body_for: Callable[[int], dict[str, Any]],
    timeout_s: float,
) -> KillOutcome:
    """Send ``total`` chat requests from ``concurrency`` clients; SIGKILL ``pid`` just
    before request number ``kill_after`` goes out. ``body_for(n)`` is request n's body."""
    outcome = KillOutcome()

    async def drive() -> None:
        sent = 0
        async with httpx.AsyncClient(base_url=endpoint, timeout=timeout_s) as client:

            async def one() -> None:
                nonlocal sent
                while sent < total:
                    sent += 1
                    if sent == kill_after:
                        os.kill(pid, signal.SIGKILL)
                    body = body_for(sent)
                    started = time.monotonic()
                    response = await client.post("/chat/completions", json=body)
                    outcome.latencies.append(time.monotonic() - started)
                    outcome.statuses.append(response.status_code)

            await asyncio.gather(*(one() for _ in range(concurrency)))

    asyncio.run(drive())
    outcome.decisions = _decision_counts(endpoint.removesuffix("/v1"))
    return outcome


@pytest.fixture
def kill_mid_traffic() -> Callable[..., KillOutcome]:
    """``kill_mid_traffic(endpoint, pid, total=, concurrency=, kill_after=, body_for=,
    timeout_s=) -> KillOutcome`` (a fixture because test modules cannot import each other)."""
    return _kill_mid_traffic
