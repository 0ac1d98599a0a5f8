"""Leader election on a ``coordination.k8s.io/v1`` Lease.

Every operator replica, in the cluster (the chart's Deployment) or outside it (``tandem
operator run --kubeconfig``), competes for the same Lease; only the holder reconciles.
The record and rules are client-go's, so the Lease reads the same in ``kubectl get lease``:

- a candidate takes the Lease when it does not exist, when its holder released it
  (empty ``holderIdentity``), or when it saw no renewal for ``leaseDurationSeconds``
  (measured on the candidate's own monotonic clock from the moment it saw the record
  change, so clock skew between machines does not matter);
- the holder renews every ``retry_period``; if it cannot renew for ``renew_deadline`` it
  stops leading (before anyone else may take over, since renew_deadline < lease_duration);
- writes carry the read ``resourceVersion``: two candidates racing for an expired Lease
  get one success and one 409.
- On shutdown the holder releases the Lease, so a successor starts at once.

Why not kubernetes_asyncio.leaderelection: it has no request timeouts, logs and retries
every error the same way, cannot release on shutdown, and writes naive local timestamps.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp

from tandem_operator import metrics
from tandem_operator.kube.client import LEASES, ApiError, Conflict, KubeClient, NotFound
from tandem_operator.problems import RecurringProblem

logger = logging.getLogger(__name__)

Manifest = dict[str, Any]


class Decision(enum.Enum):
    CREATE = "create"  # no Lease yet
    RENEW = "renew"  # we hold it
    TAKE = "take"  # free or expired
    WAIT = "wait"  # someone else holds a live Lease


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    holder: str
    duration_seconds: int
    acquire_time: str | None
    renew_time: str | None
    transitions: int
    resource_version: str

    @property
    def fingerprint(self) -> tuple[str, str | None]:
        return self.holder, self.renew_time


def record_from_lease(obj: Manifest) -> LeaseRecord:
    spec = obj.get("spec") or {}
    return LeaseRecord(
        holder=spec.get("holderIdentity") or "",
        duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=spec.get("acquireTime"),
        renew_time=spec.get("renewTime"),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=str(obj.get("metadata", {}).get("resourceVersion", "")),
    )


def decide(
    record: LeaseRecord | None, identity: str, *, observed_at: float, now: float
) -> Decision:
    """What a candidate should do, given the Lease and when it last saw the record change."""
    if record is None:
        return Decision.CREATE
    if record.holder == identity:
        return Decision.RENEW
    if not record.holder or now - observed_at >= record.duration_seconds:
        return Decision.TAKE
    return Decision.WAIT


class LeaseNamespaceMissing(Exception):
    """The Lease's namespace does not exist: nobody can lead until it does."""

    def __init__(self, namespace: str) -> None:
        super().__init__(
            f"namespace {namespace} does not exist: create it (kubectl create namespace "
            f"{namespace}) or pass --leader-election-namespace; waiting for it"
        )


def micro_time(moment: datetime) -> str:
    """metav1.MicroTime's wire format."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")
        self.identity = identity
        self.is_leader = False
        self._client = client
        self._name = name
        self._namespace = namespace
        self._lease_duration = lease_duration
        self._renew_deadline = renew_deadline
        self._retry_period = retry_period
        self._monotonic = monotonic
        self._wall = wall
        self._seen: tuple[str, str | None] | None = None
        self._seen_at = 0.0
        self.last_activity = monotonic()  # for /healthz: the election loop is alive
        self._problem = RecurringProblem(logger)
        # For /readyz: True while the Lease cannot even be created (its namespace is gone).
        self.blocked = False
        self._ever_led = False

    # ------------------------------------------------------------------ one attempt

    def _spec(self, record: LeaseRecord | None, *, taking: bool) -> Manifest:
        now = micro_time(self._wall())
        transitions = record.transitions if record else 0
        if taking and record is not None and record.holder and record.holder != self.identity:
            transitions += 1
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self._lease_duration)),
            "acquireTime": now if taking or record is None else record.acquire_time or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def _body(self, spec: Manifest, resource_version: str | None) -> Manifest:
        meta: Manifest = {"name": self._name, "namespace": self._namespace}
        if resource_version:
            meta["resourceVersion"] = resource_version
        return {
            "apiVersion": LEASES.api_version,
            "kind": "Lease",
            "metadata": meta,
            "spec": spec,
        }

    async def try_acquire_or_renew(self) -> bool:
        """One round of the protocol; True when we hold the Lease afterwards."""
        self.last_activity = self._monotonic()
        lease = await self._client.get(LEASES, self._namespace, self._name)
        record = record_from_lease(lease) if lease else None
        now = self._monotonic()
        if record is not None and record.fingerprint != self._seen:
            self._seen, self._seen_at = record.fingerprint, now
        decision = decide(record, self.identity, observed_at=self._seen_at, now=now)
        if decision is Decision.WAIT:
            return False
        try:
            if decision is Decision.CREATE:
                try:
                    await self._client.create(
                        LEASES, self._namespace, self._body(self._spec(None, taking=True), None)
                    )
                except NotFound:  # the Lease API is core: only the namespace can be missing
                    raise LeaseNamespaceMissing(self._namespace) from None
            else:
                assert record is not None
                spec = self._spec(record, taking=decision is Decision.TAKE)
                await self._client.replace(
                    LEASES, self._namespace, self._body(spec, record.resource_version)
                )
        except Conflict:
            return False  # someone else wrote first; look again next round
        if decision is not Decision.RENEW:
            logger.info(
                "acquired leader lease %s/%s as %s", self._namespace, self._name, self.identity
            )
        return True

    async def _attempt(self) -> bool:
        try:
            held = await self.try_acquire_or_renew()
        except LeaseNamespaceMissing as exc:
            self.blocked = True
            self._problem.report(str(exc))
            return False
        except aiohttp.ClientConnectorError as exc:
            self._problem.report(f"leader election: cannot reach the API server ({exc}); retrying")
            return False
        except (ApiError, aiohttp.ClientError, TimeoutError) as exc:
            self._problem.report(f"leader election: {exc}; retrying")
            return False
        self.blocked = False
        self._problem.resolve(f"leader election works again ({self._namespace}/{self._name})")
        return held

    async def release(self) -> None:
        """Give the Lease up (only if we still hold it) so a successor need not wait."""
        lease = await self._client.get(LEASES, self._namespace, self._name)
        if not lease or record_from_lease(lease).holder != self.identity:
            return
        record = record_from_lease(lease)
        now = micro_time(self._wall())
        spec = {
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": record.transitions,
        }
        try:
            await self._client.replace(
                LEASES, self._namespace, self._body(spec, record.resource_version)
            )
            logger.info("released leader lease %s/%s", self._namespace, self._name)
        except Conflict:
            pass  # it changed hands meanwhile: nothing of ours to release

    # ------------------------------------------------------------------ loops

    async def _acquire(self) -> None:
        while True:
            if await self._attempt():
                return
            # Jitter keeps standby replicas from hitting the API server in lockstep.
            await asyncio.sleep(self._retry_period * random.uniform(1.0, 1.2))

    async def _keep_renewing(self) -> None:
        """Returns when leadership is lost."""
        last_renewed = self._monotonic()
        while True:
            await asyncio.sleep(self._retry_period)
            if await self._attempt():
                last_renewed = self._monotonic()
                continue
            if self._seen is not None and self._seen[0] not in ("", self.identity):
                logger.warning("leader lease taken by %s", self._seen[0])
                return
            if self._monotonic() - last_renewed >= self._renew_deadline:
                logger.warning("could not renew leader lease for %.0fs", self._renew_deadline)
                return

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Forever: wait for the Lease, run ``lead()`` while holding it; re-run on loss.

        ``lead`` is cancelled when leadership is lost. An exception from ``lead``
        propagates (after the Lease is released).
        """
        try:
            while True:
                await self._acquire()
                self.is_leader = self._ever_led = True
                metrics.IS_LEADER.set(1)
                lead_task = asyncio.ensure_future(lead())
                renew_task = asyncio.ensure_future(self._keep_renewing())
                try:
                    await asyncio.wait({lead_task, renew_task}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for task in (lead_task, renew_task):
                        task.cancel()
                    await asyncio.wait({lead_task, renew_task})
                    self.is_leader = False
                    metrics.IS_LEADER.set(0)
                if lead_task.done() and not lead_task.cancelled() and lead_task.exception():
                    raise lead_task.exception()  # type: ignore[misc]
                logger.warning("lost leadership; standing by")
        finally:
            try:
                if self._ever_led:  # else there is nothing of ours to release
                    await asyncio.wait_for(self.release(), timeout=5)
            except (ApiError, aiohttp.ClientError, TimeoutError) as exc:
                logger.warning("could not release leader lease: %s", exc)
