"""The autoscaler loop: one per InferenceCluster in ``builtin`` mode, leader only.

Every ``spec.autoscaling.intervalSeconds`` (or sooner: between rounds it reads once a
second whether the router diverted long prompts, and then decides at once, see
``tandem.autoscale.early``) a cluster's loop:

1. reads its frontends' router metrics (``metrics_source``) -- if none answers, it
   skips the round: no blind action;
2. per pool, builds the policy's observation from those metrics plus the WorkerPool's
   size and its pods (ready, pending for room) from the operator's caches, and calls
   :func:`tandem.autoscale.decide`;
3. when the desired size changes: on a scale-down it first annotates the pool's pods
   with ``pod-deletion-cost`` (the victims :func:`choose_victims` picks lowest), then
   writes ``WorkerPool /scale``, emits an Event and wakes the reconciler, which makes
   the workload follow. The pods then drain the Kubernetes way: ``preStop: /drain``
   flips readiness (the headless Service drops them, so the router stops routing)
   and returns once their in-flight requests are done, within the grace period;
4. records the decision in WorkerPool status and the queue depth in the cluster's
   status, under its own field manager (see ``scaling``).

A scale-up held back because pods are pending for capacity is reported as
``ScalingLimited=True`` (reason ``Unschedulable``) on the InferenceCluster, and whether the
load can be read at all as ``ScalingActive`` (False, e.g. ``NoMetricsSource``: an
out-of-cluster operator without ``--frontend-metrics-url``), through
:meth:`Autoscaler.amend_status`, which the reconciler calls so that conditions keep a
single writer. A problem that lasts is logged once, not every round.
Mode ``external`` starts no loop: replicas belong to HPA/KEDA.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import aiohttp

from tandem.api.v1alpha1 import Condition, InferenceCluster, PoolRole
from tandem.autoscale import (
    LoadSample,
    PolicyState,
    ScaleDecision,
    compute_observation,
    compute_scaling_config,
    decide,
    initial_state,
)
from tandem.autoscale.early import (
    POLL_SECONDS,
    may_decide_early,
    may_wake_from_zero,
    prompts_diverted_since,
    requests_waiting,
)
from tandem.autoscale.exposition import SampleWindow
from tandem.sim.planned_spec import apply_cluster_plan
from tandem_operator import metrics, names, reasons
from tandem_operator.kube.client import EVENTS, PODS, WORKER_POOLS, ApiError, KubeClient, NotFound
from tandem_operator.kube.informer import Caches, Key
from tandem_operator.problems import RecurringProblem
from tandem_operator.scaling.decisions import (
    AUTOSCALER_FIELD_MANAGER,
    autoscaler_runs,
    compute_active_condition,
    compute_deletion_costs,
    compute_limit,
    compute_pod_loads,
    compute_pool_counts,
    compute_scaling_condition,
    compute_scaling_events,
    pool_pods,
    render_cluster_queue_status,
    render_deletion_cost_patches,
    render_event,
    render_pool_scaling_status,
    render_scale_message,
    render_scale_patch,
)
from tandem_operator.scaling.metrics_source import FrontendScrape, FrontendSource, ScrapeError
from tandem_operator.status.compute import StatusResult
from tandem_operator.status.observe import InvalidObject, parse_cluster

logger = logging.getLogger(__name__)

Manifest = dict[str, Any]

SUPERVISE_SECONDS = 1.0  # how soon a new, changed or deleted cluster is noticed
# Queue depth in status is for people and dashboards: refreshed at most this often
# (a scale writes at once). Prometheus has the live series.
STATUS_REFRESH_SECONDS = 10.0
MERGE_PATCH = "application/merge-patch+json"


def _rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(slots=True)
class _Pool:
    state: PolicyState | None = None
    previous: LoadSample | None = None
    window: SampleWindow = field(default_factory=SampleWindow)  # for the decode time
    decision: ScaleDecision | None = None
    last_scale_time: str | None = None
    last_scale_reason: str | None = None
    # A /scale write the cache may not show yet: (resourceVersion, replicas).
    written: tuple[int, int] | None = None
    status_body: Manifest | None = None
    status_at: float = 0.0


@dataclass(slots=True)
class _Cluster:
    pools: dict[PoolRole, _Pool] = field(default_factory=dict)
    status_body: Manifest | None = None
    status_at: float = 0.0
    scraped: bool = False  # a round has tried to read the frontends
    # (ScalingActive reason, message) while the frontends cannot be read.
    scrape_problem: tuple[str, str] | None = None
    scrape_log: RecurringProblem = field(default_factory=lambda: RecurringProblem(logger))


class Autoscaler:
    def __init__(
        self,
        client: KubeClient,
        caches: Caches,
        source: FrontendSource,
        *,
        identity: str,
        enqueue: Callable[[Key], None],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        now: Callable[[], datetime],
    ) -> None:
        self._client = client
        self._caches = caches
        self._source = source
        self._identity = identity
        self._enqueue = enqueue
        self._clock = clock
        self._sleep = sleep
        self._now = now
        self._loops: dict[Key, asyncio.Task[None]] = {}
        self._clusters: dict[Key, _Cluster] = {}

    # ------------------------------------------------------------------ loops

    async def run(self) -> None:
        """Keep one loop per builtin-autoscaled cluster until cancelled."""
        try:
            async with asyncio.TaskGroup() as tasks:
                while True:
                    self._sync(tasks)
                    await asyncio.sleep(SUPERVISE_SECONDS)
        finally:
            for task in self._loops.values():
                task.cancel()
            self._loops.clear()
            metrics.AUTOSCALER_LOOPS.set(0)
            await self._source.close()

    def _wanted(self) -> set[Key]:
        wanted = set()
        for obj in self._caches.of("InferenceCluster").items():
            if obj["metadata"].get("deletionTimestamp"):
                continue
            with contextlib.suppress(InvalidObject):  # the reconciler reports invalid specs
                if autoscaler_runs(parse_cluster(obj)):
                    meta = obj["metadata"]
                    wanted.add((meta.get("namespace", ""), meta["name"]))
        return wanted

    def _sync(self, tasks: asyncio.TaskGroup) -> None:
        wanted = self._wanted()
        for key in list(self._loops):
            if key not in wanted or self._loops[key].done():
                self._loops.pop(key).cancel()
                if key not in wanted:
                    self._clusters.pop(key, None)
                    self._enqueue(key)  # drop ScalingLimited now that nobody sets it
        for key in wanted - set(self._loops):
            self._clusters.setdefault(key, _Cluster())
            self._loops[key] = tasks.create_task(self._loop(key), name=f"autoscale {key}")
            logger.info("[%s/%s] autoscaler loop started", *key)
        metrics.AUTOSCALER_LOOPS.set(len(self._loops))

    async def _loop(self, key: Key) -> None:
        while True:
            obj = self._caches.of("InferenceCluster").get(*key)
            if obj is None:
                return
            try:
                cr = parse_cluster(obj)
            except InvalidObject:  # the reconciler reports it
                return
            # planning.mode auto: the planned bounds and targets, as the reconciler renders.
            cr = apply_cluster_plan(cr, cr.status.plan if cr.status else None)
            if not autoscaler_runs(cr):
                return
            started = self._clock()
            try:
                await self._round(key, cr)
            except ApiError as exc:
                metrics.AUTOSCALER_ROUNDS.labels("api_error").inc()
                logger.warning("[%s/%s] autoscaler round failed: %s", *key, exc)
            except (aiohttp.ClientError, TimeoutError) as exc:
                metrics.AUTOSCALER_ROUNDS.labels("api_error").inc()
                logger.warning("[%s/%s] autoscaler round failed: %r", *key, exc)
            interval = float(cr.spec.autoscaling.interval_seconds)
            await self._until_next_round(key, cr, started + interval)

    async def _until_next_round(self, key: Key, cr: InferenceCluster, due: float) -> None:
        """Sleep until ``due``, or less: once a second, where an early round could act,
        read whether the router diverted long prompts since the last round, or requests
        wait for a decode worker while that pool is empty (``tandem.autoscale.early``)."""
        while (left := due - self._clock()) > 0:
            await self._sleep(min(left, POLL_SECONDS))
            if due - self._clock() <= 0:
                return
            if await self._prompts_diverted(key, cr):
                why = "long prompts diverted"
            elif await self._waiting_at_zero(key, cr):
                why = "requests wait for a decode worker"
            else:
                continue
            metrics.AUTOSCALER_EARLY_ROUNDS.inc()
            logger.info("[%s/%s] %s: deciding now", *key, why)
            return

    async def _prompts_diverted(self, key: Key, cr: InferenceCluster) -> bool:
        namespace, name = key
        memory = self._clusters.get(key)
        prefill = memory.pools.get(PoolRole.PREFILL) if memory is not None else None
        pool = self._caches.of("WorkerPool").get(namespace, names.pool_name(name, PoolRole.PREFILL))
        if prefill is None or prefill.previous is None or pool is None:
            return False
        current = compute_pool_counts(_with_pending_write(pool, prefill), []).current
        maximum = compute_scaling_config(cr.spec, PoolRole.PREFILL).max_replicas
        interval = float(cr.spec.autoscaling.interval_seconds)
        if not may_decide_early(current, maximum, self._clock() - prefill.previous.at, interval):
            return False
        pods = self._caches.of("Pod").for_cluster(namespace, name)
        latest = await self._source.diverted_prompts(cr, _frontend_pods(pods))
        return prompts_diverted_since(prefill.previous.diverted_prompts_total, latest)

    async def _waiting_at_zero(self, key: Key, cr: InferenceCluster) -> bool:
        namespace, name = key
        memory = self._clusters.get(key)
        decode = memory.pools.get(PoolRole.DECODE) if memory is not None else None
        pool = self._caches.of("WorkerPool").get(namespace, names.pool_name(name, PoolRole.DECODE))
        if decode is None or pool is None:
            return False
        current = compute_pool_counts(_with_pending_write(pool, decode), []).current
        maximum = compute_scaling_config(cr.spec, PoolRole.DECODE).max_replicas
        if not may_wake_from_zero(current, maximum):
            return False
        pods = self._caches.of("Pod").for_cluster(namespace, name)
        return requests_waiting(await self._source.waiting_for_worker(cr, _frontend_pods(pods)))

    # ------------------------------------------------------------------ one round

    async def _round(self, key: Key, cr: InferenceCluster) -> None:
        namespace, name = key
        memory = self._clusters.setdefault(key, _Cluster())
        pods = self._caches.of("Pod").for_cluster(namespace, name)
        frontends = _frontend_pods(pods)
        now = self._clock()
        try:
            with metrics.AUTOSCALER_SCRAPE_DURATION.time():
                scrape = await self._source.scrape(cr, frontends, at=now)
        except ScrapeError as exc:
            metrics.AUTOSCALER_ROUNDS.labels("scrape_failed").inc()
            self._scrape_failed(key, memory, exc)
            return
        self._scrape_worked(key, memory)
        limits_before = {
            r: compute_limit(p.decision) for r, p in memory.pools.items() if p.decision
        }
        samples: dict[PoolRole, LoadSample] = {}
        for role in PoolRole:
            pool = self._caches.of("WorkerPool").get(namespace, names.pool_name(name, role))
            if pool is None:
                continue  # the reconciler has not created it yet
            state = memory.pools.setdefault(role, _Pool())
            samples[role] = scrape.reading.sample(role)
            await self._decide(cr, role, pool, pods, scrape, state, now)
        await self._write_cluster_status(cr, memory, samples, now)
        limits_after = {r: compute_limit(p.decision) for r, p in memory.pools.items() if p.decision}
        if limits_after != limits_before:
            self._enqueue(key)  # the reconciler rewrites ScalingLimited
        metrics.AUTOSCALER_ROUNDS.labels("decided").inc()

    def _scrape_failed(self, key: Key, memory: _Cluster, exc: ScrapeError) -> None:
        """Say it once (log and ``ScalingActive``), however many rounds it lasts."""
        memory.scraped = True
        if memory.scrape_problem is None or memory.scrape_problem[0] != exc.reason:
            memory.scrape_problem = (exc.reason, str(exc))
            self._enqueue(key)  # the reconciler writes ScalingActive=False
        level = logging.INFO if exc.reason == reasons.NO_READY_FRONTEND else logging.WARNING
        message = memory.scrape_problem[1]
        memory.scrape_log.report(f"[{key[0]}/{key[1]}] autoscaler: {message}", level=level)

    def _scrape_worked(self, key: Key, memory: _Cluster) -> None:
        first = not memory.scraped
        memory.scraped = True
        if first or memory.scrape_problem is not None:
            memory.scrape_problem = None
            self._enqueue(key)  # ScalingActive=True
        memory.scrape_log.resolve(f"[{key[0]}/{key[1]}] autoscaler: reading the frontends")

    async def _decide(
        self,
        cr: InferenceCluster,
        role: PoolRole,
        pool: Manifest,
        pods: list[Manifest],
        scrape: FrontendScrape,
        memory: _Pool,
        now: float,
    ) -> None:
        members = pool_pods(pods, role)
        counts = compute_pool_counts(_with_pending_write(pool, memory), members)
        sample = scrape.reading.sample(role)
        observation = compute_observation(
            counts, sample, memory.previous, decode_baseline=memory.window.baseline()
        )
        memory.window.add(sample)
        state = memory.state or initial_state(now, counts.current)
        decision, memory.state = decide(
            compute_scaling_config(cr.spec, role), observation, state, now=now
        )
        memory.previous, memory.decision = sample, decision
        metrics.AUTOSCALER_DECISIONS.labels(role.value, decision.reason.value).inc()
        if decision.changed:
            await self._resize(cr, role, pool, members, scrape, decision, memory)
        await self._write_pool_status(cr, role, memory, sample, now, force=decision.changed)

    async def _resize(
        self,
        cr: InferenceCluster,
        role: PoolRole,
        pool: Manifest,
        members: list[Manifest],
        scrape: FrontendScrape,
        decision: ScaleDecision,
        memory: _Pool,
    ) -> None:
        namespace = cr.metadata.namespace or "default"
        pool_name = pool["metadata"]["name"]
        if decision.desired < decision.current:
            loads = compute_pod_loads(members, scrape.worker_loads)
            costs = compute_deletion_costs(loads, decision.current - decision.desired)
            for pod_name, patch in render_deletion_cost_patches(members, costs):
                with contextlib.suppress(NotFound):  # already gone
                    await self._client.request(
                        "PATCH",
                        PODS.path(namespace, pod_name),
                        query=[("fieldManager", AUTOSCALER_FIELD_MANAGER)],
                        body=patch,
                        content_type=MERGE_PATCH,
                    )
        scale = await self._client.request(
            "PATCH",
            WORKER_POOLS.path(namespace, pool_name, "scale"),
            query=[("fieldManager", AUTOSCALER_FIELD_MANAGER)],
            body=render_scale_patch(decision.desired),
            content_type=MERGE_PATCH,
        )
        version = _resource_version(scale)
        memory.written = (version, decision.desired) if version is not None else None
        memory.last_scale_time = _rfc3339(self._now())
        memory.last_scale_reason = decision.reason.value
        direction = "up" if decision.desired > decision.current else "down"
        metrics.AUTOSCALER_SCALES.labels(role.value, direction).inc()
        message = render_scale_message(role, decision)
        logger.info("[%s/%s] %s", namespace, cr.metadata.name, message)
        await self._event(cr, "Normal", decision.reason.value, message)
        self._enqueue((namespace, cr.metadata.name))  # the workload follows at once

    # ------------------------------------------------------------------ status, events

    async def _write_pool_status(
        self,
        cr: InferenceCluster,
        role: PoolRole,
        memory: _Pool,
        sample: LoadSample,
        now: float,
        *,
        force: bool,
    ) -> None:
        body = render_pool_scaling_status(
            cr.metadata.namespace or "default",
            names.pool_name(cr.metadata.name, role),
            sample,
            last_scale_time=memory.last_scale_time,
            last_scale_reason=memory.last_scale_reason,
        )
        if not _due(body, memory.status_body, memory.status_at, now, force):
            return
        with contextlib.suppress(NotFound):
            await self._client.apply(
                body, field_manager=AUTOSCALER_FIELD_MANAGER, subresource="status"
            )
        memory.status_body, memory.status_at = body, now

    async def _write_cluster_status(
        self,
        cr: InferenceCluster,
        memory: _Cluster,
        samples: dict[PoolRole, LoadSample],
        now: float,
    ) -> None:
        if not samples:
            return
        body = render_cluster_queue_status(cr, samples)
        if not _due(body, memory.status_body, memory.status_at, now, force=False):
            return
        with contextlib.suppress(NotFound):
            await self._client.apply(
                body, field_manager=AUTOSCALER_FIELD_MANAGER, subresource="status"
            )
        memory.status_body, memory.status_at = body, now

    async def _event(self, cr: InferenceCluster, type_: str, reason: str, message: str) -> None:
        body = render_event(
            cr,
            type_=type_,
            reason=reason,
            message=message,
            now=_rfc3339(self._now()),
            identity=self._identity,
        )
        try:
            await self._client.create(EVENTS, cr.metadata.namespace or "default", body)
        except ApiError as exc:
            # Events are best effort: status already records the decision.
            logger.warning("event %s not recorded: %s", reason, exc)
            return
        metrics.EVENTS_EMITTED.labels(type_).inc()

    def amend_status(self, cr: InferenceCluster, result: StatusResult) -> StatusResult:
        """Add ``ScalingLimited`` and ``ScalingActive`` to the status the reconciler is about
        to write (and a Warning Event when one turns bad). Called by the reconciler, so
        conditions have one writer; a cluster without a builtin loop gets neither."""
        if not autoscaler_runs(cr):
            return result
        key = (cr.metadata.namespace or "default", cr.metadata.name)
        previous = list(cr.status.conditions) if cr.status else []
        memory = self._clusters.get(key)
        generation = cr.metadata.generation or 0
        now = _rfc3339(self._now())
        decisions = {r: p.decision for r, p in (memory.pools if memory else {}).items()}
        known = {r: d for r, d in decisions.items() if d is not None}
        # Until this replica has a round of its own (e.g. a new leader), keep what was said.
        limited = (
            compute_scaling_condition(known, previous=previous, generation=generation, now=now)
            if known
            else _find(previous, reasons.SCALING_LIMITED)
        )
        active = (
            compute_active_condition(
                memory.scrape_problem, previous=previous, generation=generation, now=now
            )
            if memory is not None and memory.scraped
            else _find(previous, reasons.SCALING_ACTIVE)
        )
        ours = [c for c in (limited, active) if c is not None]
        if not ours:
            return result
        kept = [c for c in result.cluster.conditions if c.type not in {c.type for c in ours}]
        events = (*result.events, *compute_scaling_events(previous, ours))
        cluster = result.cluster.model_copy(update={"conditions": [*kept, *ours]})
        return replace(result, cluster=cluster, events=events)


def _frontend_pods(pods: list[Manifest]) -> list[Manifest]:
    return [
        p
        for p in pods
        if (p["metadata"].get("labels") or {}).get(names.LABEL_ROLE) == names.FRONTEND
    ]


def _find(conditions: list[Condition], kind: str) -> Condition | None:
    return next((c for c in conditions if c.type == kind), None)


def _resource_version(obj: Manifest) -> int | None:
    try:
        return int(obj["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return None


def _with_pending_write(pool: Manifest, memory: _Pool) -> Manifest:
    """The WorkerPool as of our last /scale write, when the cache has not caught up:
    deciding from a stale size would step twice."""
    if memory.written is None:
        return pool
    version, replicas = memory.written
    cached = _resource_version(pool)
    if cached is not None and cached >= version:
        memory.written = None
        return pool
    return {**pool, "spec": {**(pool.get("spec") or {}), "replicas": replicas}}


def _due(body: Manifest, last: Manifest | None, at: float, now: float, force: bool) -> bool:
    if last is None or force:
        return True
    return body != last and now - at >= STATUS_REFRESH_SECONDS
