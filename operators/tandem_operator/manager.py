"""Wire the operator together: client, health server, leader election, informers, workers.

Only the Lease holder watches and reconciles; standby replicas just compete for the
Lease, so a failover costs one relist (a second at a hundred clusters).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp

from tandem.portcheck import bind_error
from tandem_operator import metrics, names
from tandem_operator.controller import Reconciler
from tandem_operator.kube import client as k8s
from tandem_operator.kube.client import ApiError, KubeClient
from tandem_operator.kube.health import HealthState, start_server
from tandem_operator.kube.informer import Caches, Informer, Key, key_of
from tandem_operator.kube.leader import LeaderElector
from tandem_operator.kube.workqueue import WorkQueue
from tandem_operator.planning.runner import DEFAULT_TIMEOUT_SECONDS, ProcessPlanner
from tandem_operator.planning.service import PlanService
from tandem_operator.planning.watcher import WorkloadWatcher
from tandem_operator.problems import RecurringProblem
from tandem_operator.render.credentials import DEFAULT_PROPAGATION, requested_rotation
from tandem_operator.render.placement import NVLINK_DOMAIN_LABEL
from tandem_operator.render.pods import RenderSettings
from tandem_operator.scaling.autoscaler import Autoscaler
from tandem_operator.scaling.metrics_source import MetricsSource
from tandem_operator.status.observe import observe_pod

logger = logging.getLogger(__name__)

Manifest = dict[str, Any]

LEASE_NAME = "tandem-operator"
CHILD_SELECTOR = f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY},{names.LABEL_CLUSTER}"
# Out of a cluster the probes need not be reachable from anywhere else; in a pod the
# kubelet probes the pod IP (and `kubectl port-forward` dials the pod's loopback).
LOOPBACK = "127.0.0.1"
ALL_ADDRESSES = "0.0.0.0"
IN_CLUSTER_METRICS_PORT = 8080
OUT_OF_CLUSTER_METRICS_PORT = 8081


def default_metrics_host(in_cluster: bool) -> str:
    return ALL_ADDRESSES if in_cluster else LOOPBACK


def default_metrics_port(in_cluster: bool) -> int:
    """8080 in a pod (the chart's port); out of a cluster 8081, because 8080 on localhost is
    where kubectl and helm dial when no kubeconfig is set: an operator answering there would
    turn a forgotten `export KUBECONFIG` into "the server could not find the requested
    resource" instead of "connection refused"."""
    return IN_CLUSTER_METRICS_PORT if in_cluster else OUT_OF_CLUSTER_METRICS_PORT


def missing_crd_message(resource: k8s.Resource) -> str:
    return (
        f"CRD {resource.plural}.{resource.group} is not installed: `helm install tandem "
        "charts/tandem -n tandem-system --create-namespace` or `kubectl apply --server-side "
        "-f manifests/crds/` installs it; waiting for it"
    )


@dataclass(frozen=True, slots=True)
class OperatorOptions:
    kubeconfig: str | None = None
    in_cluster: bool = False
    namespaces: tuple[str, ...] = ()  # (): every namespace
    metrics_host: str = LOOPBACK
    metrics_port: int = OUT_OF_CLUSTER_METRICS_PORT
    leader_election_namespace: str = "tandem-system"
    lease_name: str = LEASE_NAME
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}")
    workers: int = 8
    resync_seconds: float = 600.0
    settings: RenderSettings = field(default_factory=RenderSettings)
    # Autoscaler: where to read a cluster's frontend metrics instead of its pods
    # ("NAMESPACE/NAME" or "*" -> base URL); for out-of-cluster development and e2e.
    frontend_metrics_urls: dict[str, str] = field(default_factory=dict)
    # How long each phase of a credentials or MPI SSH key rotation waits for every pod's
    # Secret mount to catch up (kubelet's sync period plus its cache TTL, with room to spare).
    credential_propagation: timedelta = DEFAULT_PROPAGATION
    # planning.mode check/auto: a plan running longer is killed and reported.
    plan_timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS


def _generation_changed(old: Manifest | None, new: Manifest | None) -> bool:
    if old is None or new is None:
        return True
    before, after = old["metadata"], new["metadata"]
    return bool(
        before.get("generation") != after.get("generation")
        or before.get("deletionTimestamp") != after.get("deletionTimestamp")
    )


def _rotation_requested(old: Manifest | None, new: Manifest | None) -> bool:
    def value(obj: Manifest | None) -> str:
        return requested_rotation((obj or {}).get("metadata", {}).get("annotations") or {})

    return value(old) != value(new)


def _ignore(old: Manifest | None, new: Manifest | None) -> None:
    """Nodes are read when a cluster reconciles; their changes enqueue nothing."""


def _owner_key(obj: Manifest) -> Key | None:
    meta = obj["metadata"]
    cluster = (meta.get("labels") or {}).get(names.LABEL_CLUSTER)
    if obj.get("kind") == "WorkerPool":
        cluster = (obj.get("spec") or {}).get("clusterName") or cluster
    return (meta.get("namespace", ""), cluster) if cluster else None


class Controller:
    """Informers, a work queue and workers: everything the leader runs."""

    def __init__(self, client: KubeClient, options: OperatorOptions) -> None:
        self.queue: WorkQueue[Key] = WorkQueue()
        self.informers: list[Informer] = []
        self._failing: dict[Key, RecurringProblem] = {}  # clusters whose reconcile fails
        self._options = options
        # A namespaced kind: one informer per watched namespace (RBAC may grant no more),
        # all filling one store; a cluster-scoped kind (Node): one informer.
        watched: tuple[str | None, ...] = options.namespaces or (None,)

        def informer(
            resource: k8s.Resource,
            on_change: Callable[[Manifest | None, Manifest | None], None],
            **kw: Any,
        ) -> Informer:
            first: Informer | None = None
            for ns in watched if resource.namespaced else (None,):
                inf = Informer(
                    client,
                    resource,
                    namespace=ns,
                    on_change=on_change,
                    store=first.store if first else None,
                    **kw,
                )
                self.informers.append(inf)
                first = first or inf
            assert first is not None
            return first

        clusters = informer(
            k8s.INFERENCE_CLUSTERS,
            self._on_cluster,
            missing_message=missing_crd_message(k8s.INFERENCE_CLUSTERS),
        )
        informer(
            k8s.WORKER_POOLS,
            self._on_pool,
            keep_managed_fields=True,
            missing_message=missing_crd_message(k8s.WORKER_POOLS),
        )
        for resource in (
            k8s.DEPLOYMENTS,
            k8s.SERVICES,
            k8s.CONFIG_MAPS,
            k8s.PDBS,
            k8s.SERVICE_ACCOUNTS,
            k8s.ROLES,
            k8s.ROLE_BINDINGS,
            k8s.NETWORK_POLICIES,
            # Profiling Jobs: one that finishes enqueues its cluster, which reads its table.
            k8s.JOBS,
            # Only the credentials Secrets we made are cached (RBAC cannot narrow the
            # watch itself: docs/operator.md says why list/watch on Secrets is needed).
            k8s.SECRETS,
        ):
            informer(resource, self._on_child, label_selector=CHILD_SELECTOR)
        informer(k8s.PODS, self._on_pod, label_selector=CHILD_SELECTOR)
        informer(
            k8s.LEADER_WORKER_SETS, self._on_child, label_selector=CHILD_SELECTOR, optional=True
        )
        # GB200: ComputeDomains we own, and which NVLink domain (clique) each node is in.
        informer(k8s.COMPUTE_DOMAINS, self._on_child, label_selector=CHILD_SELECTOR, optional=True)
        informer(k8s.NODES, _ignore, label_selector=NVLINK_DOMAIN_LABEL)
        self._clusters = clusters
        caches = Caches({inf.resource.kind: inf.store for inf in self.informers})
        # Pod IPs are only reachable (and real) from inside the cluster.
        frontends = MetricsSource(options.frontend_metrics_urls, scrape_pods=options.in_cluster)
        self.autoscaler = Autoscaler(
            client,
            caches,
            frontends,
            identity=options.identity,
            enqueue=self.queue.add,
            now=lambda: datetime.now(UTC),
        )
        self.plans = PlanService(
            ProcessPlanner(timeout_s=options.plan_timeout_seconds), enqueue=self.queue.add
        )
        self.workloads = WorkloadWatcher(
            caches, frontends, enqueue=self.queue.add, now=lambda: datetime.now(UTC)
        )
        self.reconciler = Reconciler(
            client,
            caches,
            options.settings,
            identity=options.identity,
            now=lambda: datetime.now(UTC),
            amend_status=self.autoscaler.amend_status,
            plans=self.plans,
            workloads=self.workloads,
            credential_propagation=options.credential_propagation,
        )

    def synced(self) -> bool:
        return all(inf.synced.is_set() for inf in self.informers)

    # ------------------------------------------------------------------ event -> key

    def _on_cluster(self, old: Manifest | None, new: Manifest | None) -> None:
        metrics.MANAGED_CLUSTERS.set(len(self._clusters.store))
        if new is None:
            if old is not None:
                self.queue.forget(key_of(old))
                self._failing.pop(key_of(old), None)
            return
        # Our own status writes do not bump the generation: skip them. A credentials
        # rotation is asked for with an annotation, which does not bump it either.
        if _generation_changed(old, new) or _rotation_requested(old, new):
            self.queue.add(key_of(new))

    def _on_pool(self, old: Manifest | None, new: Manifest | None) -> None:
        obj = new or old
        if obj is not None and _generation_changed(old, new):
            key = _owner_key(obj)
            if key:
                self.queue.add(key)

    def _on_child(self, old: Manifest | None, new: Manifest | None) -> None:
        obj = new or old
        key = _owner_key(obj) if obj is not None else None
        if key:
            self.queue.add(key)

    def _on_pod(self, old: Manifest | None, new: Manifest | None) -> None:
        # Readiness counts come from the workloads' status; pods only matter for the
        # problems they reveal (unschedulable, image pull, crash loop). Filtering here
        # saves most reconciles while hundreds of pods start.
        before = observe_pod(old).problem if old else None
        after = observe_pod(new).problem if new else None
        if before != after:
            self._on_child(old, new)

    # ------------------------------------------------------------------ loops

    async def _work(self) -> None:
        while True:
            key = await self.queue.get()
            started = time.perf_counter()
            outcome = "success"
            try:
                requeue = await self.reconciler.reconcile(key)
                self.queue.forget(key)
                if requeue is not None:
                    outcome = "requeue"
                    self.queue.add_after(key, requeue)
                problem = self._failing.pop(key, None)
                if problem is not None:
                    problem.resolve(f"[{key[0]}/{key[1]}] reconciles again")
            except ApiError as exc:
                outcome = "error"
                metrics.RECONCILE_ERRORS.labels("api").inc()
                self._failed(key, str(exc))
            except (aiohttp.ClientError, TimeoutError) as exc:
                outcome = "error"
                metrics.RECONCILE_ERRORS.labels("connection").inc()
                self._failed(key, repr(exc))
            finally:
                self.queue.done(key)
                metrics.RECONCILES.labels(outcome).inc()
                metrics.RECONCILE_DURATION.observe(time.perf_counter() - started)

    def _failed(self, key: Key, error: str) -> None:
        """Retry with backoff; say so once while the same error lasts."""
        delay = self.queue.add_rate_limited(key)
        problem = self._failing.setdefault(key, RecurringProblem(logger))
        problem.report(f"[{key[0]}/{key[1]}] reconcile failed: {error}; retrying")
        logger.debug("[%s/%s] next reconcile in %.1fs", *key, delay)

    async def _resync(self) -> None:
        """Level-triggered safety net: revisit every cluster now and then."""
        while True:
            await asyncio.sleep(self._options.resync_seconds)
            for obj in self._clusters.store.items():
                self.queue.add(key_of(obj))

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as tasks:
                for inf in self.informers:
                    tasks.create_task(inf.run())
                await asyncio.gather(*(inf.synced.wait() for inf in self.informers))
                logger.info("caches synced: %d InferenceClusters", len(self._clusters.store))
                for _ in range(self._options.workers):
                    tasks.create_task(self._work())
                tasks.create_task(self._resync())
                tasks.create_task(self.autoscaler.run())
                tasks.create_task(self.plans.run())
                tasks.create_task(self.workloads.run())
        finally:
            self.queue.close()


async def run(options: OperatorOptions) -> None:
    """Run until cancelled: serve probes, compete for the Lease, reconcile while leading.

    Raises ``k8s.ConfigError`` (no usable kubeconfig) or ``tandem.portcheck.PortError``
    (the metrics port is taken) before doing anything else."""
    client = await KubeClient.connect(options.kubeconfig, in_cluster=options.in_cluster)
    try:
        await _serve(client, options)
    finally:
        await client.close()


async def _serve(client: KubeClient, options: OperatorOptions) -> None:
    elector = LeaderElector(
        client,
        name=options.lease_name,
        namespace=options.leader_election_namespace,
        identity=options.identity,
    )
    current: list[Controller] = []

    async def lead() -> None:
        controller = Controller(client, options)
        current[:] = [controller]
        try:
            await controller.run()
        finally:
            current.clear()

    state = HealthState(
        last_activity=lambda: elector.last_activity,
        is_leader=lambda: elector.is_leader,
        synced=lambda: bool(current) and current[0].synced(),
        blocked=lambda: elector.blocked,
    )
    try:
        runner = await start_server(state, options.metrics_host, options.metrics_port)
    except OSError as exc:
        raise bind_error(options.metrics_host, options.metrics_port, exc) from None
    logger.info(
        "tandem operator %s: metrics on %s:%d, lease %s/%s, watching %s",
        options.identity,
        options.metrics_host,
        options.metrics_port,
        options.leader_election_namespace,
        options.lease_name,
        ", ".join(options.namespaces) or "all namespaces",
    )
    try:
        await elector.run(lead)
    finally:
        await runner.cleanup()
