"""Where the autoscaler reads a cluster's load: the router metrics of its frontends.

**In a cluster** the operator scrapes every ready frontend pod directly
(``http://<podIP>:9091/metrics``, the metrics port, never served on the API port, and
``http://<podIP>:<spec.frontend.port>/readyz``), found in the Pod cache
it already keeps, concurrently and each request with a timeout. Pods, not the Service:
the Service would answer from one frontend at a time, and each frontend only knows its
own requests. Readings are merged by :func:`tandem.autoscale.exposition.combine_readings`.
The frontends' NetworkPolicy admits the operator's pods to both ports.

**Out of cluster** (development, and the e2e suite, whose simulated pods run no
containers and have no reachable IPs) the operator can be pointed at a frontend it can
reach: ``tandem operator run --frontend-metrics-url NAMESPACE/NAME=URL`` (or ``*=URL``
for every cluster), e.g. a port-forward or a local ``tandem up``. This override is an
operator flag on purpose: a field or annotation on the InferenceCluster would let anyone
who can edit a cluster make the operator fetch arbitrary URLs. Out of cluster, pod IPs
are never dialled (``scrape_pods=False``): from outside they are at best unreachable, and
on a simulated cluster they are made up.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import aiohttp

from tandem.api.v1alpha1 import InferenceCluster, PoolRole
from tandem.autoscale import WorkerLoad
from tandem.autoscale.exposition import (
    DIVERTED_PROMPTS_TOTAL,
    REQUESTS_WAITING_FOR_WORKER,
    RouterReading,
    combine_readings,
    combine_worker_loads,
    parse_gauge,
    parse_router_reading,
    parse_worker_loads,
    sum_counter,
)
from tandem.sim.workload_observation import LENGTH_SERIES, LengthCounts, parse_length_counts
from tandem_operator import names, reasons
from tandem_operator.status.observe import observe_pod

logger = logging.getLogger(__name__)

Manifest = dict[str, Any]

T = TypeVar("T")

SCRAPE_TIMEOUT_SECONDS = 2.0
WILDCARD = "*"


class ScrapeError(Exception):
    """No frontend of the cluster could be read: the autoscaler must not act blindly.
    ``reason`` is the ``ScalingActive=False`` reason; the message says what to do."""

    def __init__(self, message: str, *, reason: str = reasons.METRICS_UNAVAILABLE) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class FrontendTarget:
    """Where one frontend is read: ``metrics`` (base URL of /metrics) and ``api`` (of
    /readyz, the workers' loads). The same URL for an override (a local frontend serves
    both; through a port-forward of the metrics port /readyz is missing, and the
    per-worker loads with it)."""

    metrics: str
    api: str

    @classmethod
    def single(cls, url: str) -> FrontendTarget:
        return cls(metrics=url, api=url)


@dataclass(frozen=True, slots=True)
class FrontendScrape:
    """One round's view of a cluster: load per pool, and per worker (by address)."""

    reading: RouterReading
    worker_loads: Mapping[str, WorkerLoad] = field(default_factory=dict)
    frontends: int = 0


def parse_url_overrides(values: Iterable[str]) -> dict[str, str]:
    """``NAMESPACE/NAME=URL`` or ``*=URL`` flags -> {key: base URL}; URL is the
    frontend's base (``http://127.0.0.1:8000``) or its ``/metrics``."""
    out: dict[str, str] = {}
    for value in values:
        key, sep, url = value.partition("=")
        if not sep or not url.startswith(("http://", "https://")):
            raise ValueError(f"expected NAMESPACE/NAME=http://HOST:PORT or *=URL, got {value!r}")
        if key != WILDCARD and (key.count("/") != 1 or not all(key.split("/"))):
            raise ValueError(f"expected NAMESPACE/NAME or * before '=', got {key!r}")
        out[key] = url.rstrip("/").removesuffix("/metrics")
    return out


def compute_frontend_targets(
    cr: InferenceCluster,
    frontend_pods: Sequence[Manifest],
    overrides: Mapping[str, str],
    *,
    scrape_pods: bool,
) -> list[FrontendTarget]:
    """The frontends to scrape for ``cr`` (pure): an override, else (only when the
    operator runs in the cluster, ``scrape_pods``) its ready frontend pods."""
    namespace = cr.metadata.namespace or "default"
    override = overrides.get(f"{namespace}/{cr.metadata.name}") or overrides.get(WILDCARD)
    if override:
        return [FrontendTarget.single(override)]
    if not scrape_pods:
        return []
    port = cr.spec.frontend.port
    targets = []
    for pod in frontend_pods:
        ip = (pod.get("status") or {}).get("podIP")
        if ip and observe_pod(pod).ready:
            host = f"[{ip}]" if ":" in ip else ip
            targets.append(
                FrontendTarget(
                    metrics=f"http://{host}:{names.FRONTEND_METRICS_PORT}",
                    api=f"http://{host}:{port}",
                )
            )
    return sorted(targets, key=lambda t: t.metrics)


async def _ask_each(
    targets: Sequence[FrontendTarget], ask: Callable[[FrontendTarget], Awaitable[T]]
) -> tuple[dict[str, T], list[str]]:
    """``ask`` every frontend at once: the answers by address (the metrics URL), and
    ``"base: why"`` for each that failed to answer (unreachable, timed out, unreadable).
    A cancellation or any other exception (a bug) is raised for the caller to see."""
    results = await asyncio.gather(*(ask(t) for t in targets), return_exceptions=True)
    answers: dict[str, T] = {}
    failures: list[str] = []
    for target, result in zip(targets, results, strict=True):
        if isinstance(result, aiohttp.ClientError | TimeoutError | ValueError):
            failures.append(f"{target.metrics}: {result!r}")
        elif isinstance(result, BaseException):
            raise result
        else:
            answers[target.metrics] = result
    return answers, failures


def no_source_message(cr: InferenceCluster) -> str:
    """Why an out-of-cluster operator cannot autoscale ``cr``, and the flag that fixes it."""
    namespace, name = cr.metadata.namespace or "default", cr.metadata.name
    port, deployment = names.FRONTEND_METRICS_PORT, names.frontend_name(name)
    return (
        "the operator runs outside the cluster, where frontend pods cannot be reached: run "
        f"it with --frontend-metrics-url {namespace}/{name}=http://127.0.0.1:{port} (e.g. "
        f"through `kubectl port-forward -n {namespace} deploy/{deployment} {port}`, the "
        "frontend's metrics port) or *=URL; until then the pools keep their size"
    )


class FrontendSource(Protocol):
    """What the autoscaler reads load from (:class:`MetricsSource` over HTTP)."""

    async def scrape(
        self, cr: InferenceCluster, frontend_pods: Sequence[Manifest], *, at: float
    ) -> FrontendScrape:
        """The cluster's load now; raises :class:`ScrapeError` when nothing answered."""
        ...

    async def diverted_prompts(
        self, cr: InferenceCluster, frontend_pods: Sequence[Manifest]
    ) -> float | None:
        """The frontends' ``tandem_router_diverted_prompts_total`` summed, read between
        rounds (``tandem.autoscale.early``); None when any frontend did not answer."""
        ...

    async def waiting_for_worker(
        self, cr: InferenceCluster, frontend_pods: Sequence[Manifest]
    ) -> float | None:
        """The frontends' ``tandem_router_requests_waiting_for_worker`` summed, read
        between rounds while the decode pool is empty; None when any did not answer."""
        ...

    async def close(self) -> None: ...


class MetricsSource:
    """Scrapes frontends over HTTP (aiohttp); one session for every cluster."""

    def __init__(
        self,
        overrides: Mapping[str, str] | None = None,
        *,
        scrape_pods: bool,
        timeout_seconds: float = SCRAPE_TIMEOUT_SECONDS,
    ) -> None:
        self._overrides = dict(overrides or {})
        self._scrape_pods = scrape_pods
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def scrape(
        self, cr: InferenceCluster, frontend_pods: Sequence[Manifest], *, at: float
    ) -> FrontendScrape:
        targets = self._targets(cr, frontend_pods)
        answers, failures = await _ask_each(targets, lambda t: self._scrape_one(t, at))
        if not answers:
            raise ScrapeError("; ".join(failures))
        if failures:  # partial view: act on the frontends that answered
            logger.warning("some frontends could not be read: %s", "; ".join(failures))
        return FrontendScrape(
            reading=combine_readings((a[0] for a in answers.values()), at=at),
            worker_loads=combine_worker_loads(a[1] for a in answers.values()),
            frontends=len(answers),
        )

    async def diverted_prompts(
        self, cr: InferenceCluster, frontend_pods: Sequence[Manifest]
    ) -> float | None:
        targets = compute_frontend_targets(
            cr, frontend_pods, self._overrides, scrape_pods=self._scrape_pods
        )
        answers, failures = await _ask_each(targets, self._read_diverted)
        if failures:
            return None  # the next round reports it
        return sum_counter(answers.values())

    async def waiting_for_worker(
        self, cr: InferenceCluster, frontend_pods: Sequence[Manifest]
    ) -> float | None:
        targets = compute_frontend_targets(
            cr, frontend_pods, self._overrides, scrape_pods=self._scrape_pods
        )
        answers, failures = await _ask_each(targets, self._read_waiting)
        if failures:
            return None  # the next round reports it
        return sum_counter(answers.values())

    async def length_counts(
        self, cr: InferenceCluster, frontend_pods: Sequence[Manifest]
    ) -> dict[str, LengthCounts]:
        """Each answering frontend's prompt and answer length histograms, by address
        (``tandem.sim.workload_observation``); raises :class:`ScrapeError` when none
        can be read."""
        targets = self._targets(cr, frontend_pods)
        answers, failures = await _ask_each(targets, self._read_lengths)
        if not answers:
            raise ScrapeError("; ".join(failures))
        return answers

    def _targets(
        self, cr: InferenceCluster, frontend_pods: Sequence[Manifest]
    ) -> list[FrontendTarget]:
        """The frontends to read; :class:`ScrapeError` saying why when there are none."""
        targets = compute_frontend_targets(
            cr, frontend_pods, self._overrides, scrape_pods=self._scrape_pods
        )
        if not targets:
            if self._scrape_pods:
                raise ScrapeError("no frontend pod is ready", reason=reasons.NO_READY_FRONTEND)
            raise ScrapeError(no_source_message(cr), reason=reasons.NO_METRICS_SOURCE)
        return targets

    async def _read_lengths(self, target: FrontendTarget) -> LengthCounts:
        return parse_length_counts(await self._get_metrics(target.metrics, LENGTH_SERIES))

    async def _read_diverted(self, target: FrontendTarget) -> float | None:
        text = await self._get_metrics(target.metrics, {"name[]": DIVERTED_PROMPTS_TOTAL})
        return parse_router_reading(text, at=0.0).sample(PoolRole.PREFILL).diverted_prompts_total

    async def _read_waiting(self, target: FrontendTarget) -> float | None:
        text = await self._get_metrics(target.metrics, {"name[]": REQUESTS_WAITING_FOR_WORKER})
        return parse_gauge(text, REQUESTS_WAITING_FOR_WORKER)

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def _get_metrics(
        self, base: str, params: Mapping[str, str] | Sequence[tuple[str, str]] | None = None
    ) -> str:
        async with self._open().get(f"{base}/metrics", params=params) as response:
            if response.status != 200:
                raise ValueError(f"/metrics answered {response.status}")
            return await response.text()

    async def _scrape_one(
        self, target: FrontendTarget, at: float
    ) -> tuple[RouterReading, dict[str, WorkerLoad]]:
        text = await self._get_metrics(target.metrics)
        async with self._open().get(f"{target.api}/readyz") as response:
            body = await response.read()  # 503 (not ready) still lists the workers
        try:
            views = parse_worker_loads(json.loads(body))
        except ValueError as exc:
            logger.debug("%s/readyz unreadable (%s): no per-worker loads", target.api, exc)
            views = {}
        return parse_router_reading(text, at=at), views
