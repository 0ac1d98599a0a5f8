"""Reconcile one InferenceCluster: render -> apply -> observe -> status -> events.

The script is linear and level-triggered: it never asks "what changed?", only "what should
exist?" and "what exists?". Reads come from the informers' caches; writes are server-side
applies, sent only when the live object differs from the rendered one (see ``diff``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

import pydantic
from prometheus_client import Gauge

from tandem.api.v1alpha1 import InferenceCluster, PlanningMode, PoolRole, WorkerPoolStatus
from tandem.security.pki import Issued, issue
from tandem.sim.planned_spec import apply_cluster_plan
from tandem_operator import metrics, names, reasons
from tandem_operator.kube.client import (
    BY_KIND,
    COMPUTE_DOMAINS,
    EVENTS,
    JOBS,
    LEADER_WORKER_SETS,
    SECRETS,
    ApiError,
    Conflict,
    KubeClient,
    NotFound,
)
from tandem_operator.kube.diff import contains, first_difference, needs_apply, owns_field
from tandem_operator.kube.informer import Caches, Key, Store
from tandem_operator.planning.service import PlanService
from tandem_operator.planning.watcher import WorkloadWatcher
from tandem_operator.render.children import (
    PoolHandle,
    render_cluster_children,
    render_credentials,
    render_mpi_keys,
    render_pool_children,
    render_ray_token,
    render_worker_pool,
    uses_leader_worker_set,
)
from tandem_operator.render.contract import pool_spec
from tandem_operator.render.credentials import (
    DEFAULT_PROPAGATION,
    parse_credentials_secret,
    plan_credentials,
    requested_rotation,
)
from tandem_operator.render.mpi_keys import (
    KeyPair,
    adopt_mpi_keys_secret,
    generate_key_pair,
    owned_by,
    parse_mpi_keys_secret,
    plan_mpi_keys,
)
from tandem_operator.render.mpi_keys import requested_rotation as requested_key_rotation
from tandem_operator.render.multinode import launches_mpi_world, launches_ray_group
from tandem_operator.render.placement import (
    NVLINK_DOMAIN_LABEL,
    NvlinkPlacement,
    compute_nvlink_placement,
)
from tandem_operator.render.pods import RenderSettings
from tandem_operator.render.profiles import get_profile
from tandem_operator.render.profiling import (
    Profiled,
    ProfileFailed,
    Profiling,
    compute_profile_digest,
    needs_profile,
    observe_profile_job,
    profiled_digest,
    read_recorded_profile,
    render_perf_table,
    render_profile_job,
)
from tandem_operator.render.ray_token import generate_token, read_ray_token
from tandem_operator.scaling.decisions import autoscaler_runs
from tandem_operator.status.capacity_gate import check_rollout
from tandem_operator.status.compute import EventRecord, StatusResult, compute_status, status_to_wire
from tandem_operator.status.observe import (
    Failure,
    InvalidObject,
    Observed,
    PlanObservation,
    PodObservation,
    PoolObservation,
    observe_pod,
    observe_workload,
    parse_cluster,
)

logger = logging.getLogger(__name__)

Manifest = dict[str, Any]

# Kinds the operator creates and may therefore prune (never Pods, never WorkerPools:
# every cluster always has both pools).
PRUNABLE_KINDS = (
    "ConfigMap",
    "Job",
    "Service",
    "Deployment",
    "LeaderWorkerSet",
    "PodDisruptionBudget",
    "ComputeDomain",
)
REQUEUE_MISSING_API_SECONDS = 30.0
REQUEUE_APPLY_FAILED_SECONDS = 60.0


class KindNotServed(Exception):
    """Applying a kind the API server does not serve (its CRD is not installed)."""

    def __init__(self, kind: str, cause: NotFound) -> None:
        super().__init__(f"{kind} is not served by the API server: {cause.message}")
        self.kind = kind


class SecretConflict(Exception):
    """A Secret the operator keeps something of the cluster's in is someone else's
    (mpi_keys.py, ray_token.py)."""

    def __init__(self, namespace: str, name: str, what: str, reason: str) -> None:
        super().__init__(
            f"Secret {name} exists, {what}: it is left as it is and nothing is applied until "
            f"it is gone (kubectl -n {namespace} delete secret {name}, once nothing else "
            "needs it)"
        )
        self.reason = reason


def _rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class Reconciler:
    def __init__(
        self,
        client: KubeClient,
        caches: Caches,
        settings: RenderSettings,
        *,
        identity: str,
        now: Callable[[], datetime],
        amend_status: Callable[[InferenceCluster, StatusResult], StatusResult] | None = None,
        plans: PlanService | None = None,
        workloads: WorkloadWatcher | None = None,
        credential_propagation: timedelta = DEFAULT_PROPAGATION,
        issue_credentials: Callable[[str, datetime], Issued] = issue,
        new_mpi_keys: Callable[[], KeyPair] = generate_key_pair,
        new_ray_token: Callable[[], bytes] = generate_token,
    ) -> None:
        """``credential_propagation``: how long each rotation phase of the credentials and
        of the MPI SSH keys waits (credentials.py, mpi_keys.py); ``issue_credentials(cluster,
        now)`` makes a new CA and member certificate, ``new_mpi_keys()`` an SSH key pair."""
        self._client = client
        self._propagation = credential_propagation
        self._issue = issue_credentials
        self._new_mpi_keys = new_mpi_keys
        self._new_ray_token = new_ray_token
        self._caches = caches
        self._settings = settings
        self._identity = identity
        self._now = now
        # The autoscaler's ScalingLimited condition joins the status written here.
        self._amend_status = amend_status
        # None: specs asking for planning are rendered as written, with no SloPredicted.
        self._plans = plans
        # None: plans are for spec.workload as written, and status shows no observed workload.
        self._workloads = workloads

    # ------------------------------------------------------------------ entry point

    async def reconcile(self, key: Key) -> float | None:
        """One pass over cluster ``key``; returns a requeue delay, or None."""
        obj = self._caches.of("InferenceCluster").get(*key)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            _forget_cluster_metrics(*key)
            return None  # gone or going: owner references let the GC remove the children
        try:
            cr = parse_cluster(obj)
        except InvalidObject as exc:
            metrics.RECONCILE_ERRORS.labels("invalid_spec").inc()
            logger.warning("[%s/%s] invalid spec: %s", key[0], key[1], exc)
            return None  # nothing to do until the object changes
        pools: dict[PoolRole, Manifest] = {}
        profile = await self._profile(cr) if self._plans and needs_profile(cr.spec) else None
        requeue = profile.requeue_s if isinstance(profile, Profiling) else None
        plan = self._look_up_plan(key, cr, profile)
        # What is rendered: under planning.mode auto the planned shape (spec -> plan -> render).
        shaped = apply_cluster_plan(cr, plan.effective if plan is not None else None)
        # A spec that cannot render or fit its GPUs is not applied at all (capacity_gate).
        failure: Failure | None = check_rollout(shaped)
        try:
            if failure is None:
                pools, rotation = await self._apply_all(shaped, obj)
                requeue = _sooner(requeue, rotation)
        except KindNotServed as exc:
            reason = _MISSING_KIND_REASONS.get(exc.kind, reasons.APPLY_FAILED)
            failure = Failure(reason, _missing_kind_message(exc))
            requeue = REQUEUE_MISSING_API_SECONDS
        except SecretConflict as exc:
            # That Secret is not watched (not ours): look again for it to be gone.
            failure = Failure(exc.reason, str(exc))
            requeue = REQUEUE_APPLY_FAILED_SECONDS
        except ApiError as exc:
            if exc.status not in (400, 403, 422):
                raise  # transient: the queue retries with backoff
            failure = Failure(reasons.APPLY_FAILED, f"{exc.status} {exc.reason}: {exc.message}")
            requeue = REQUEUE_APPLY_FAILED_SECONDS
        observed = self._observe(shaped, obj, pools, failure, plan)
        result = compute_status(shaped, observed, _rfc3339(self._now()))
        if self._amend_status is not None:
            result = self._amend_status(shaped, result)
        await self._write_status(cr, obj, result)
        _record_cluster_metrics(key, shaped, result)
        await self._emit(cr, result.events)
        return requeue

    def _look_up_plan(
        self, key: Key, cr: InferenceCluster, profile: Profiled | ProfileFailed | Profiling | None
    ) -> PlanObservation | None:
        """The plan for planning modes check and auto; never waits for one (a plan still
        being made enqueues the cluster once it is ready, and so does a profiling Job
        that finishes)."""
        if self._plans is None or cr.spec.planning.mode is PlanningMode.OFF:
            return None
        previous = cr.status.plan if cr.status else None
        spec = cr.spec
        if self._workloads is not None:
            # The workload adopted from observation, once the served one left spec.workload.
            workload = self._workloads.planned_workload(key, cr)
            if workload is not None and workload != spec.workload:
                spec = spec.model_copy(update={"workload": workload})
            observed = self._workloads.workload_status(key, cr)
        else:
            observed = None
        if isinstance(profile, ProfileFailed | Profiling):
            return PlanObservation(None, previous, observed, profile)
        table = profile.table if profile is not None else None
        return PlanObservation(self._plans.lookup(key, spec, previous, table), previous, observed)

    async def _profile(self, cr: InferenceCluster) -> Profiled | ProfileFailed | Profiling:
        """The step-time table to plan ``cr`` from: as recorded in its perf-table
        ConfigMap, else measured by its profiling Job, which this starts (or replaces,
        when what it profiles changed) and whose outcome it records, once."""
        namespace, cluster = cr.metadata.namespace or "default", cr.metadata.name
        digest = compute_profile_digest(cr, self._settings)
        table = self._caches.of("ConfigMap").get(namespace, names.perf_table_name(cluster))
        recorded = read_recorded_profile(table, digest)
        if recorded is not None:
            return recorded
        job = self._caches.of("Job").get(namespace, names.profile_job_name(cluster))
        if job is None:
            logger.info("[%s/%s] profiling the engine (%s)", namespace, cluster, digest)
            job = await self._apply(render_profile_job(cr, self._settings))
        elif profiled_digest(job) != digest:
            # Its pod template cannot change: the Job goes, and its deletion enqueues the
            # cluster, whose next reconcile starts the new one.
            logger.info("[%s/%s] what is profiled changed; profiling again", namespace, cluster)
            meta = job["metadata"]
            await self._client.delete(JOBS, namespace, meta["name"], uid=meta.get("uid"))
            return Profiling(f"profiling again (Job {meta['name']}): what it measures changed")
        pods = self._caches.of("Pod").for_cluster(namespace, cluster)
        outcome = observe_profile_job(job, pods, self._now())
        if isinstance(outcome, Profiling):
            return outcome
        await self._apply(render_perf_table(cr, self._settings, outcome))
        if isinstance(outcome, Profiled):
            size = len(outcome.table.encode())
            event = EventRecord(
                "Normal",
                reasons.EVENT_PROFILED,
                f"measured the engine's step times ({size} bytes in ConfigMap "
                f"{names.perf_table_name(cluster)}); planning from them",
            )
        else:
            event = EventRecord("Warning", reasons.PROFILING_FAILED, outcome.message)
        await self._emit(cr, [event])
        return outcome

    # ------------------------------------------------------------------ apply

    async def _apply(self, desired: Manifest) -> Manifest:
        store = self._caches.of(desired["kind"])
        meta = desired["metadata"]
        live = store.get(meta["namespace"], meta["name"])
        if not needs_apply(desired, live):
            metrics.APPLIES_SKIPPED.labels(desired["kind"]).inc()
            assert live is not None
            return live
        metrics.APPLIES.labels(desired["kind"]).inc()
        if live is not None and logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "applying %s %s/%s: differs at %s",
                desired["kind"],
                meta["namespace"],
                meta["name"],
                first_difference(live, desired),
            )
        try:
            result = await self._client.apply(desired)
        except NotFound as exc:
            if exc.kind == "namespaces":
                # The cluster's namespace is being deleted under it: an API error like
                # any other (retried with backoff, then the cluster is gone), not a
                # missing CRD.
                raise
            raise KindNotServed(desired["kind"], exc) from exc
        store.upsert_if_newer(result)
        return result

    async def _apply_pool(self, cr: InferenceCluster, role: PoolRole) -> Manifest:
        """Apply a WorkerPool; under autoscaling, hand its size over to the scalers.

        Autoscaling off: we apply ``spec.replicas`` (force) and so revert any other writer.
        Autoscaling on: the first apply creates the pool at its starting size; then a second
        field manager co-owns ``spec.replicas`` and we stop applying it. Server-side apply
        keeps a field while any manager owns it, so the size is never reset to the CRD
        default, and HPA/KEDA/the autoscaler become its owners with their first write.
        """
        autoscaled = cr.spec.autoscaling.enabled
        namespace = cr.metadata.namespace or "default"
        name = names.pool_name(cr.metadata.name, role)
        live = self._caches.of("WorkerPool").get(namespace, name)
        if autoscaled and live is not None and _owns_replicas(live):
            await self._seed_replicas(live)  # autoscaling just turned on: hand over first
        pool = await self._apply(
            render_worker_pool(cr, role, include_replicas=live is None or not autoscaled)
        )
        if autoscaled and live is None and _owns_replicas(pool):
            await self._seed_replicas(pool)  # created at its starting size: hand over now
            pool = await self._apply(render_worker_pool(cr, role, include_replicas=False))
        return pool

    async def _seed_replicas(self, pool: Manifest) -> None:
        meta = pool["metadata"]
        seed = {
            "apiVersion": pool["apiVersion"],
            "kind": "WorkerPool",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "spec": {"replicas": pool["spec"]["replicas"]},
        }
        # A conflict means another writer already owns a different size: nothing to keep.
        with contextlib.suppress(Conflict):
            await self._client.apply(seed, field_manager=names.REPLICAS_FIELD_MANAGER, force=False)

    async def _apply_credentials(self, cr: InferenceCluster, obj: Manifest) -> float | None:
        """Create the cluster's credentials, or move a rotation on; returns when to look
        again while a rotation phase waits."""
        namespace = cr.metadata.namespace or "default"
        live = self._caches.of("Secret").get(
            namespace, names.credentials_secret_name(cr.metadata.name)
        )
        state = parse_credentials_secret(live)
        if live is not None and state is None:
            logger.warning(
                "[%s/%s] credentials Secret is unreadable; issuing new credentials",
                namespace,
                cr.metadata.name,
            )
        now = self._now()
        plan = plan_credentials(
            state,
            requested_rotation(obj["metadata"].get("annotations") or {}),
            now,
            lambda: self._issue(cr.metadata.name, now),
            self._propagation,
        )
        if plan.state != state:
            logger.info(
                "[%s/%s] credentials: %s", namespace, cr.metadata.name, plan.state.phase.value
            )
            await self._apply(render_credentials(cr, plan.state))
        return plan.requeue_s

    async def _apply_mpi_keys(self, cr: InferenceCluster, obj: Manifest) -> float | None:
        """For a cluster with a pool launching an MPI world: create its SSH keys, adopt a
        hand-made Secret of theirs, or move a rotation on; returns when to look again
        while a rotation phase waits. Raises SecretConflict for someone else's Secret."""
        if not any(launches_mpi_world(cr, role) for role in PoolRole):
            return None
        namespace, cluster = cr.metadata.namespace or "default", cr.metadata.name
        name = names.mpi_ssh_secret_name(cluster)
        # The cache holds only Secrets with our label: one made by hand is read directly.
        live = self._caches.of("Secret").get(namespace, name)
        if live is None:
            live = await self._client.get(SECRETS, namespace, name)
        requested = requested_key_rotation(obj["metadata"].get("annotations") or {})
        now = self._now()
        adopted = live is not None and not owned_by(live, cr.metadata.uid)
        if live is not None and adopted:
            state = adopt_mpi_keys_secret(live, requested, now)
            if state is None:
                raise SecretConflict(
                    namespace,
                    name,
                    "holds no SSH key pair (id_ed25519, id_ed25519.pub) and was not made by "
                    "the operator, which generates the MPI SSH keys there",
                    reasons.MPI_SECRET_CONFLICT,
                )
        else:
            state = parse_mpi_keys_secret(live)
            if live is not None and state is None:
                logger.warning(
                    "[%s/%s] MPI SSH key Secret is unreadable; generating new keys",
                    namespace,
                    cluster,
                )
        plan = plan_mpi_keys(state, requested, now, self._new_mpi_keys, self._propagation)
        if plan.state != state:
            logger.info("[%s/%s] MPI SSH keys: %s", namespace, cluster, plan.state.phase.value)
        # Applied even when the plan is unchanged (``_apply`` skips what the live Secret
        # already holds): an adopted Secret gets its owner here.
        await self._apply(render_mpi_keys(cr, plan.state))
        if adopted:
            message = (
                f"Secret {name}, which the cluster did not own, now belongs to it with its key "
                f"pair: the operator rotates it (annotation {names.ANNOTATION_ROTATE_MPI_KEYS}) "
                "and deletes it with the cluster"
            )
            await self._emit(cr, [EventRecord("Normal", reasons.EVENT_MPI_KEYS_ADOPTED, message)])
        return plan.requeue_s

    async def _apply_ray_token(self, cr: InferenceCluster) -> None:
        """For a cluster with a pool launching Ray groups: its token Secret, made once and
        kept (ray_token.py). Raises SecretConflict for someone else's Secret."""
        if not any(launches_ray_group(cr, role) for role in PoolRole):
            return
        namespace, cluster = cr.metadata.namespace or "default", cr.metadata.name
        name = names.ray_token_secret_name(cluster)
        live = self._caches.of("Secret").get(namespace, name)
        if live is None:
            live = await self._client.get(SECRETS, namespace, name)
        if live is not None and not owned_by(live, cr.metadata.uid):
            raise SecretConflict(
                namespace,
                name,
                "was not made by the operator, which keeps the token of the cluster's Ray "
                "groups there",
                reasons.RAY_SECRET_CONFLICT,
            )
        token = read_ray_token(live)
        if token is None:
            token = self._new_ray_token()
            logger.info("[%s/%s] Ray token: generated", namespace, cluster)
        await self._apply(render_ray_token(cr, token))

    async def _apply_all(
        self, cr: InferenceCluster, obj: Manifest
    ) -> tuple[dict[PoolRole, Manifest], float | None]:
        # The Secrets first: pods mount them.
        requeue = await self._apply_credentials(cr, obj)
        requeue = _sooner(requeue, await self._apply_mpi_keys(cr, obj))
        await self._apply_ray_token(cr)
        children = render_cluster_children(cr, self._settings, include_pool_replicas=False)
        others = [c for c in children if c["kind"] != "WorkerPool"]
        # Stage 1: the ConfigMap and Services, and the pools (their uid and size feed stage 2).
        first = [c for c in others if c["kind"] != "Deployment"]
        results = await asyncio.gather(
            *(self._apply(c) for c in first), *(self._apply_pool(cr, r) for r in PoolRole)
        )
        pools = dict(zip(PoolRole, results[len(first) :], strict=True))
        # Stage 2: workloads, now that their config exists.
        second = [c for c in others if c["kind"] == "Deployment"]
        for role, pool in pools.items():
            handle = PoolHandle(
                name=pool["metadata"]["name"],
                uid=pool["metadata"]["uid"],
                replicas=int(pool["spec"].get("replicas", 1)),
            )
            second += render_pool_children(cr, role, handle, self._settings)
        await asyncio.gather(*(self._apply(c) for c in second))
        await self._prune(cr, [*children, *second], pools)
        return pools, requeue

    async def _prune(
        self, cr: InferenceCluster, desired: Iterable[Manifest], pools: dict[PoolRole, Manifest]
    ) -> None:
        """Delete children we made that the spec no longer renders (e.g. a Deployment
        replaced by a LeaderWorkerSet). Only objects owned by this cluster or its pools."""
        namespace = cr.metadata.namespace or "default"
        wanted = {(d["kind"], d["metadata"]["name"]) for d in desired}
        if self._plans is not None and needs_profile(cr.spec):
            cluster = cr.metadata.name
            wanted |= {
                ("Job", names.profile_job_name(cluster)),
                ("ConfigMap", names.perf_table_name(cluster)),
            }
        owners = {cr.metadata.uid, *(p["metadata"]["uid"] for p in pools.values())}
        for kind in PRUNABLE_KINDS:
            for obj in self._caches.of(kind).for_cluster(namespace, cr.metadata.name):
                meta = obj["metadata"]
                owned = any(ref.get("uid") in owners for ref in meta.get("ownerReferences") or ())
                if (kind, meta["name"]) in wanted or not owned:
                    continue
                logger.info(
                    "[%s/%s] pruning %s %s", namespace, cr.metadata.name, kind, meta["name"]
                )
                await self._client.delete(BY_KIND[kind], namespace, meta["name"], uid=meta["uid"])

    # ------------------------------------------------------------------ observe

    def _pods(self, namespace: str, cluster: str, component: str) -> tuple[PodObservation, ...]:
        pods = self._caches.of("Pod").for_cluster(namespace, cluster)
        return tuple(
            observe_pod(p)
            for p in pods
            if (p["metadata"].get("labels") or {}).get(names.LABEL_ROLE) == component
        )

    def _observe(
        self,
        cr: InferenceCluster,
        obj: Manifest,
        applied_pools: dict[PoolRole, Manifest],
        failure: Failure | None,
        plan: PlanObservation | None,
    ) -> Observed:
        namespace = cr.metadata.namespace or "default"
        cluster = cr.metadata.name
        pools: dict[PoolRole, PoolObservation] = {}
        for role in PoolRole:
            name = names.pool_name(cluster, role)
            pool = self._caches.of("WorkerPool").get(namespace, name) or applied_pools.get(role)
            if pool is None:
                continue
            kind = LEADER_WORKER_SETS.kind if uses_leader_worker_set(cr, role) else "Deployment"
            workload = self._caches.of(kind).get(namespace, name)
            pools[role] = PoolObservation(
                role=role,
                desired=int(pool["spec"].get("replicas", 1)),
                pool_generation=int(pool["metadata"].get("generation", 0)),
                workload=observe_workload(workload) if workload else None,
                pods=self._pods(namespace, cluster, role.value),
                previous=_previous_pool_status(pool),
            )
        frontend = self._caches.of("Deployment").get(namespace, names.frontend_name(cluster))
        return Observed(
            generation=int(obj["metadata"].get("generation", 0)),
            pools=pools,
            frontend=observe_workload(frontend) if frontend else None,
            frontend_desired=cr.spec.frontend.replicas,
            frontend_pods=self._pods(namespace, cluster, names.FRONTEND),
            failure=failure,
            nvlink=self._nvlink(cr, pools.values()),
            plan=plan,
        )

    def _nvlink(
        self, cr: InferenceCluster, pools: Iterable[PoolObservation]
    ) -> NvlinkPlacement | None:
        """NVLink domains of the cluster's scheduled workers (GB200 profiles only)."""
        if not get_profile(cr.spec.accelerator.profile).nvlink_domains:
            return None
        nodes = self._caches.of("Node")
        pod_nodes = [pod.node_name for pool in pools for pod in pool.pods if pod.node_name]
        domains: dict[str, str] = {}
        for node_name in set(pod_nodes):
            node = nodes.get("", node_name)
            labels = (node or {}).get("metadata", {}).get("labels") or {}
            domains[node_name] = labels.get(NVLINK_DOMAIN_LABEL, "")
        return compute_nvlink_placement(pod_nodes, domains)

    # ------------------------------------------------------------------ status, events

    async def _write_status(
        self, cr: InferenceCluster, obj: Manifest, result: StatusResult
    ) -> None:
        namespace = cr.metadata.namespace or "default"
        pool_store = self._caches.of("WorkerPool")
        for role, status in result.pools.items():
            name = names.pool_name(cr.metadata.name, role)
            live = pool_store.get(namespace, name)
            await self._apply_status(pool_store, "WorkerPool", namespace, name, status, live)
        await self._apply_status(
            self._caches.of("InferenceCluster"),
            "InferenceCluster",
            namespace,
            cr.metadata.name,
            result.cluster,
            obj,
        )

    async def _apply_status(
        self,
        store: Store,
        kind: str,
        namespace: str,
        name: str,
        status: Any,
        live: Manifest | None,
    ) -> None:
        wire = status_to_wire(status)
        if live is not None and contains(live.get("status") or {}, wire):
            return  # unchanged: no write, no watch event, no extra reconcile
        body = {
            "apiVersion": BY_KIND[kind].api_version,
            "kind": kind,
            "metadata": {"name": name, "namespace": namespace},
            "status": wire,
        }
        try:
            result = await self._client.apply(body, subresource="status")
        except NotFound:
            return  # deleted meanwhile
        store.upsert_if_newer(result)

    async def _emit(self, cr: InferenceCluster, events: Iterable[EventRecord]) -> None:
        namespace = cr.metadata.namespace or "default"
        now = _rfc3339(self._now())
        for event in events:
            body = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{cr.metadata.name}.", "namespace": namespace},
                "involvedObject": {
                    "apiVersion": cr.api_version,
                    "kind": "InferenceCluster",
                    "name": cr.metadata.name,
                    "namespace": namespace,
                    "uid": cr.metadata.uid,
                },
                "reason": event.reason,
                "message": event.message[:1024],
                "type": event.type,
                "source": {"component": names.FIELD_MANAGER},
                "reportingComponent": names.FIELD_MANAGER,
                "reportingInstance": self._identity[:128],
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            }
            try:
                await self._client.create(EVENTS, namespace, body)
            except ApiError as exc:
                # Events are best effort: the status already says the same thing.
                logger.warning(
                    "[%s/%s] event %s not recorded: %s",
                    namespace,
                    cr.metadata.name,
                    event.reason,
                    exc,
                )
                continue
            metrics.EVENTS_EMITTED.labels(event.type).inc()


def _sooner(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _owns_replicas(pool: Manifest) -> bool:
    return owns_field(pool, names.FIELD_MANAGER, ("spec", "replicas"))


POOL_STATES = ("desired", "ready", "max")
SLO_OBJECTIVES = ("ttft_p90", "itl_p90")


def _record_cluster_metrics(key: Key, cr: InferenceCluster, result: StatusResult) -> None:
    """Desired vs ready per pool (the same numbers as the status), each pool's autoscaling
    ceiling and the SLO targets: what dashboards and the chart's alerts read."""
    namespace, name = key
    for role, status in result.pools.items():
        counts = {"desired": status.desired_replicas, "ready": status.ready_replicas}
        if autoscaler_runs(cr):  # HPA/KEDA (mode external) keep their own ceilings
            counts["max"] = pool_spec(cr, role).max_replicas
        for state in POOL_STATES:
            value = counts.get(state)
            _set_or_remove(metrics.POOL_REPLICAS, value, namespace, name, role.value, state)
    slo = cr.spec.slo
    targets = (
        {} if slo is None else {"ttft_p90": slo.ttft_p90_seconds, "itl_p90": slo.itl_p90_seconds}
    )
    for objective in SLO_OBJECTIVES:
        _set_or_remove(metrics.SLO_TARGET, targets.get(objective), namespace, name, objective)


def _set_or_remove(gauge: Gauge, value: float | None, *labels: str) -> None:
    if value is not None:
        gauge.labels(*labels).set(value)
    else:
        with contextlib.suppress(KeyError):
            gauge.remove(*labels)


def _forget_cluster_metrics(namespace: str, name: str) -> None:
    for role in PoolRole:
        for state in POOL_STATES:
            _set_or_remove(metrics.POOL_REPLICAS, None, namespace, name, role.value, state)
    for objective in SLO_OBJECTIVES:
        _set_or_remove(metrics.SLO_TARGET, None, namespace, name, objective)


def _previous_pool_status(pool: Manifest) -> WorkerPoolStatus | None:
    raw = pool.get("status")
    if not raw:
        return None
    try:
        return WorkerPoolStatus.model_validate(raw)
    except pydantic.ValidationError:
        return None


_MISSING_KIND_REASONS = {
    LEADER_WORKER_SETS.kind: reasons.LEADER_WORKER_SET_MISSING,
    COMPUTE_DOMAINS.kind: reasons.COMPUTE_DOMAIN_MISSING,
}


def _missing_kind_message(exc: KindNotServed) -> str:
    if exc.kind == LEADER_WORKER_SETS.kind:
        return (
            "a pool spans several nodes (nodesPerWorker > 1), which needs the LeaderWorkerSet "
            f"API (sigs.k8s.io/lws); install it in the cluster ({exc})"
        )
    if exc.kind == COMPUTE_DOMAINS.kind:
        return (
            "whole-tray GB200 workers join a ComputeDomain for multi-node NVLink, which needs "
            "NVIDIA's DRA driver for GPUs (k8s-dra-driver-gpu) with ComputeDomains enabled; "
            "install it, or deploy without multi-node NVLink: chart value "
            f"fabric.computeDomains: false (operator flag --no-compute-domains) ({exc})"
        )
    return str(exc)
