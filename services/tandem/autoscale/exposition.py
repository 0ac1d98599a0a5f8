"""What the actuators read from frontends, turned into the policy's inputs (pure).

Both actuators (the operator's autoscaler loop and ``tandem up``) scrape each frontend's
``/metrics`` (Prometheus text) and ``/readyz`` (JSON) once per interval:

- :func:`parse_router_reading` turns one frontend's ``/metrics`` into a
  :class:`~tandem.autoscale.signals.LoadSample` per pool (parsed with
  prometheus_client's own parser, so any valid exposition reads the same);
- :func:`combine_readings` merges several frontends into one reading;
- :func:`parse_worker_loads` / :func:`combine_worker_loads` turn ``/readyz`` into the
  per-worker :class:`~tandem.autoscale.drain.WorkerLoad` the drain choice ranks;
- :class:`SampleWindow` keeps the older sample the decode time is averaged against.

Counters: ``prompt_tokens_total`` is the router's
``tandem_router_prefill_prompt_tokens_total`` (prompts long enough for the prefill pool,
whichever path they took; not the frontend's count of every prompt, which would keep a
pool of short-prompt traffic from ever reaching zero). Until the router exports the
others (docs/autoscaling.md, "Proposed"), the frontend's series stand in:
``requests_total`` is the count of first tokens
(``tandem_frontend_time_to_first_token_seconds_count``) and the decode time is request
duration minus time to first token, summed over the generation endpoints. A series a
frontend does not export (yet: labelled histograms appear with their first observation)
reads as unknown, and the policy sizes from the gauges alone.

How frontends combine. Each router's per-worker load is the larger of its own in-flight
work and what the worker last reported (its queue from every router), so every frontend
already sees roughly the whole pool: the pool gauges take the **largest** frontend's
value (a sum would count the pool once per frontend). Diverted prefill tokens and
counters are each router's own work: they **add up**. Per-worker in-flight counts from
``/readyz`` are each router's own requests: they add up too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tandem.api.v1alpha1 import PoolRole
from tandem.autoscale.drain import WorkerLoad
from tandem.autoscale.signals import LoadSample

QUEUE_DEPTH_REQUESTS = "tandem_router_queue_depth_requests"
QUEUE_DEPTH_TOKENS = "tandem_router_queue_depth_tokens"
ACTIVE_SEQUENCES = "tandem_router_active_sequences"
KV_UTILIZATION = "tandem_router_kv_utilization_ratio"
WORKERS = "tandem_router_workers"
DIVERTED_PREFILL_TOKENS = "tandem_router_diverted_prefill_tokens"
PROMPT_TOKENS_TOTAL = "tandem_router_prefill_prompt_tokens_total"
DIVERTED_PROMPTS_TOTAL = "tandem_router_diverted_prompts_total"
REQUESTS_WAITING_FOR_WORKER = "tandem_router_requests_waiting_for_worker"
FIRST_TOKENS_TOTAL = "tandem_frontend_time_to_first_token_seconds_count"
FIRST_TOKEN_SECONDS_SUM = "tandem_frontend_time_to_first_token_seconds_sum"
REQUEST_SECONDS_SUM = "tandem_frontend_request_duration_seconds_sum"
GENERATION_ENDPOINTS = frozenset({"chat", "completions"})
# How far back the mean decode time looks (short windows favour short sequences).
DECODE_BASELINE_SECONDS = 600.0

_POOLS = {role.value: role for role in PoolRole}


@dataclass(frozen=True, slots=True)
class RouterReading:
    """One scrape (of one frontend, or several combined): load per pool and the
    workers the router(s) consider healthy, per pool."""

    at: float
    samples: Mapping[PoolRole, LoadSample] = field(default_factory=dict)
    healthy_workers: Mapping[PoolRole, int] = field(default_factory=dict)

    def sample(self, role: PoolRole) -> LoadSample:
        return self.samples.get(role) or LoadSample(at=self.at)


@dataclass(slots=True)
class _Acc:
    queued_requests: float = 0.0
    queued_tokens: float = 0.0
    active_sequences: float = 0.0
    kv_utilization: float = 0.0
    diverted: float = 0.0
    healthy: float = 0.0


@dataclass(slots=True)
class _Counters:
    prompt_tokens: float | None = None
    diverted_prompts: float | None = None
    first_tokens: float | None = None
    first_token_seconds: float | None = None
    request_seconds: float | None = None

    def add(self, name: str, value: float) -> None:
        setattr(self, name, (getattr(self, name) or 0.0) + value)


def parse_router_reading(text: str, *, at: float) -> RouterReading:
    """One frontend's ``/metrics`` text -> a reading taken at ``at``.

    Raises ValueError when the text is not a Prometheus exposition. Series of unknown
    pools are ignored; a pool the router does not mention reads as idle."""
    acc = {role: _Acc() for role in PoolRole}
    counters = _Counters()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            pool = _POOLS.get(sample.labels.get("pool", ""))
            value = float(sample.value)
            if sample.name == PROMPT_TOKENS_TOTAL:
                counters.add("prompt_tokens", value)
            elif sample.name == DIVERTED_PROMPTS_TOTAL:
                counters.add("diverted_prompts", value)
            elif sample.name == FIRST_TOKENS_TOTAL:
                counters.add("first_tokens", value)
            elif sample.name == FIRST_TOKEN_SECONDS_SUM:
                counters.add("first_token_seconds", value)
            elif (
                sample.name == REQUEST_SECONDS_SUM
                and sample.labels.get("endpoint") in GENERATION_ENDPOINTS
            ):
                counters.add("request_seconds", value)
            elif sample.name == DIVERTED_PREFILL_TOKENS:
                acc[PoolRole.PREFILL].diverted += value
            elif pool is None:
                continue
            elif sample.name == QUEUE_DEPTH_REQUESTS:
                acc[pool].queued_requests += value
            elif sample.name == QUEUE_DEPTH_TOKENS:
                acc[pool].queued_tokens += value
            elif sample.name == ACTIVE_SEQUENCES:
                acc[pool].active_sequences += value
            elif sample.name == KV_UTILIZATION:
                acc[pool].kv_utilization = max(acc[pool].kv_utilization, value)
            elif sample.name == WORKERS and sample.labels.get("state") == "healthy":
                acc[pool].healthy += value
    decode_seconds = None
    if counters.request_seconds is not None and counters.first_token_seconds is not None:
        decode_seconds = max(0.0, counters.request_seconds - counters.first_token_seconds)
    counted = {
        PoolRole.PREFILL: {
            "prompt_tokens_total": counters.prompt_tokens,
            "diverted_prompts_total": counters.diverted_prompts,
        },
        PoolRole.DECODE: {
            "requests_total": counters.first_tokens,
            "decode_seconds_sum": decode_seconds,
            "decode_seconds_count": counters.first_tokens if decode_seconds is not None else None,
        },
    }
    return RouterReading(
        at=at,
        samples={
            role: LoadSample(
                at=at,
                queued_requests=int(a.queued_requests),
                queued_tokens=int(a.queued_tokens),
                diverted_prefill_tokens=int(a.diverted),
                active_sequences=int(a.active_sequences),
                kv_utilization=a.kv_utilization,
                **counted[role],
            )
            for role, a in acc.items()
        },
        healthy_workers={role: int(a.healthy) for role, a in acc.items()},
    )


def combine_readings(readings: Iterable[RouterReading], *, at: float) -> RouterReading:
    """Several frontends' readings as one (see the module doc for why max vs sum)."""
    readings = list(readings)
    samples: dict[PoolRole, LoadSample] = {}
    healthy: dict[PoolRole, int] = {}
    for role in PoolRole:
        parts = [r.sample(role) for r in readings]
        samples[role] = LoadSample(
            at=at,
            queued_requests=max((s.queued_requests for s in parts), default=0),
            queued_tokens=max((s.queued_tokens for s in parts), default=0),
            diverted_prefill_tokens=sum(s.diverted_prefill_tokens for s in parts),
            active_sequences=max((s.active_sequences for s in parts), default=0),
            kv_utilization=max((s.kv_utilization for s in parts), default=0.0),
            prompt_tokens_total=sum_counter(s.prompt_tokens_total for s in parts),
            diverted_prompts_total=sum_counter(s.diverted_prompts_total for s in parts),
            requests_total=sum_counter(s.requests_total for s in parts),
            decode_seconds_sum=sum_counter(s.decode_seconds_sum for s in parts),
            decode_seconds_count=sum_counter(s.decode_seconds_count for s in parts),
        )
        healthy[role] = max((r.healthy_workers.get(role, 0) for r in readings), default=0)
    return RouterReading(at=at, samples=samples, healthy_workers=healthy)


def parse_gauge(text: str, name: str) -> float | None:
    """The value of the unlabelled series ``name`` in one frontend's ``/metrics``; None
    when it is absent. Raises ValueError when the text is not a Prometheus exposition."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and not sample.labels:
                return float(sample.value)
    return None


def sum_counter(values: Iterable[float | None]) -> float | None:
    """A counter summed over frontends; unknown if any frontend does not export it."""
    total = 0.0
    seen = False
    for value in values:
        if value is None:
            return None
        total += value
        seen = True
    return total if seen else None


def parse_worker_loads(readyz: Any) -> dict[str, WorkerLoad]:
    """One frontend's ``/readyz`` body -> the load of each worker it knows, by address.

    Raises ValueError when the body does not have the expected shape."""
    if not isinstance(readyz, dict) or not isinstance(readyz.get("workers"), list):
        raise ValueError('expected an object with a "workers" list')
    loads: dict[str, WorkerLoad] = {}
    for entry in readyz["workers"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("address"), str):
            raise ValueError(f"malformed worker entry: {entry!r}")
        in_flight = entry.get("in_flight", 0)
        loads[entry["address"]] = WorkerLoad(
            key=entry["address"],
            ready=bool(entry.get("healthy", False)),
            draining=bool(entry.get("draining", False)),
            active_sequences=in_flight if isinstance(in_flight, int) else 0,
        )
    return loads


def combine_worker_loads(views: Iterable[Mapping[str, WorkerLoad]]) -> dict[str, WorkerLoad]:
    """Several frontends' views of the workers: in-flight counts add up (each router
    counts its own requests); a worker is ready if any router routes to it, and
    draining if any router saw it draining."""
    out: dict[str, WorkerLoad] = {}
    for view in views:
        for key, load in view.items():
            seen = out.get(key)
            if seen is None:
                out[key] = load
                continue
            out[key] = WorkerLoad(
                key=key,
                ready=seen.ready or load.ready,
                draining=seen.draining or load.draining,
                active_sequences=seen.active_sequences + load.active_sequences,
                queued_requests=seen.queued_requests + load.queued_requests,
                queued_tokens=seen.queued_tokens + load.queued_tokens,
            )
    return out


class SampleWindow:
    """A pool's recent samples, for :func:`~tandem.autoscale.signals.compute_observation`'s
    ``decode_baseline``: the oldest sample no older than ``horizon`` seconds."""

    def __init__(self, horizon: float = DECODE_BASELINE_SECONDS) -> None:
        self._horizon = horizon
        self._samples: list[LoadSample] = []

    def add(self, sample: LoadSample) -> None:
        self._samples = [s for s in self._samples if sample.at - s.at <= self._horizon]
        self._samples.append(sample)

    def baseline(self) -> LoadSample | None:
        return self._samples[0] if self._samples else None
