"""``autoscaling.json``: what ``tandem up``'s autoscaler saw and decided.

Written atomically next to ``state.json`` after every decision round; ``tandem status``
shows desired vs actual and the last decision from it, and tests read the tick log to
count reaction times in intervals. Times are wall-clock seconds (``at``) and decision
rounds (``tick``): a round is one interval, or less for one taken early because long
prompts were diverted (``early``; see ``tandem.autoscale.early``).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RECORD_FILE = "autoscaling.json"
MAX_EVENTS = 100
MAX_TICKS = 300


@dataclass(slots=True)
class PoolRecord:
    """One pool after the latest round."""

    desired: int = 0
    current: int = 0
    ready: int = 0
    recommended: int = 0
    reason: str = ""
    limited_by: str = ""
    message: str = ""
    queued_requests: int = 0
    queued_tokens: int = 0
    diverted_tokens: int = 0
    active_sequences: int = 0
    last_scale_time: float | None = None
    last_scale_reason: str | None = None
    last_scale_message: str = ""
    draining: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ScaleEvent:
    """A change: ``kind`` is ``scale`` (``from_replicas`` -> ``to_replicas``),
    ``retire`` (``worker`` left the membership with ``in_flight_left`` requests),
    ``drained`` (``worker`` stopped, ``in_flight_left`` unfinished) or ``error``."""

    tick: int
    at: float
    pool: str
    kind: str
    from_replicas: int = 0
    to_replicas: int = 0
    reason: str = ""
    message: str = ""
    worker: str = ""
    in_flight_left: int = 0


@dataclass(frozen=True, slots=True)
class TickPool:
    current: int
    ready: int
    desired: int
    queued_tokens: int
    queued_requests: int
    diverted_tokens: int
    active_sequences: int


@dataclass(frozen=True, slots=True)
class TickRecord:
    tick: int
    at: float
    pools: dict[str, TickPool]
    early: bool = False


@dataclass(slots=True)
class AutoscalingRecord:
    interval_seconds: float
    ticks: int = 0
    updated_at: float = 0.0
    error: str = ""  # why the latest round could not decide (frontend unreachable)
    pools: dict[str, PoolRecord] = field(default_factory=dict)
    events: list[ScaleEvent] = field(default_factory=list)
    recent: list[TickRecord] = field(default_factory=list)

    def add_event(self, event: ScaleEvent) -> None:
        self.events = [*self.events, event][-MAX_EVENTS:]

    def add_tick(self, tick: TickRecord) -> None:
        self.recent = [*self.recent, tick][-MAX_TICKS:]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> AutoscalingRecord:
        data: dict[str, Any] = json.loads(text)
        return cls(
            interval_seconds=float(data["interval_seconds"]),
            ticks=int(data.get("ticks", 0)),
            updated_at=float(data.get("updated_at", 0.0)),
            error=str(data.get("error", "")),
            pools={k: PoolRecord(**v) for k, v in data.get("pools", {}).items()},
            events=[ScaleEvent(**e) for e in data.get("events", [])],
            recent=[
                TickRecord(
                    tick=t["tick"],
                    at=t["at"],
                    pools={k: TickPool(**v) for k, v in t["pools"].items()},
                    early=bool(t.get("early", False)),
                )
                for t in data.get("recent", [])
            ],
        )


def record_path(state_dir: Path) -> Path:
    return state_dir / RECORD_FILE


def write_record(state_dir: Path, record: AutoscalingRecord) -> None:
    path = record_path(state_dir)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(record.to_json())
    os.replace(tmp, path)


def read_record(state_dir: Path) -> AutoscalingRecord | None:
    """The latest record, or None when the cluster does not autoscale (or not yet)."""
    try:
        return AutoscalingRecord.from_json(record_path(state_dir).read_text())
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return None  # written by another version: status just omits it
