"""Membership from the Kubernetes API: the endpoints of each pool's Service.

In a cluster the frontend finds workers the way kube-proxy does, by watching the
EndpointSlices of each pool's Service (``kubernetes.io/service-name=<service>``), not by
DNS: there may be no cluster DNS, and DNS answers hide readiness and termination.

- Endpoints whose ``conditions.ready`` holds are members the router routes to (an absent
  condition counts as ready, as the API documents). A terminating pod's endpoint turns
  not-ready: the router then stops giving it new work and lets what it has in flight
  finish (see ``WorkerTable.reconcile``). A not-ready endpoint that is not terminating
  is a pod starting (or failing its readiness probe): a starting member, never routed
  to, that a long prompt may wait for (``policy``).
- The target port is found by name in each slice (``kubernetes:///SVC.NS:grpc``) or
  taken as a number (``kubernetes:///SVC.NS:50051``).
- One list, then a watch from its resourceVersion; ``410 Gone`` or a broken stream
  relists (with back-off). Between a failure and the next good list the last known
  members stay: a flaky API server must not empty the router.

The frontend's ServiceAccount needs exactly ``list`` and ``watch`` on
``discovery.k8s.io/endpointslices`` in its own namespace (the operator renders that Role).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio import client as kube_client
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio import watch as kube_watch

from tandem.router.membership import Member
from tandem.router.policy import WorkerRole

logger = logging.getLogger(__name__)

SCHEME = "kubernetes:///"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
# Server-side watch timeout; the stream is re-opened from the last resourceVersion.
WATCH_TIMEOUT_SECONDS = 300
REQUEST_TIMEOUT_SECONDS = 10.0
RETRY_MIN_SECONDS = 0.5
RETRY_MAX_SECONDS = 15.0

Manifest = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ServiceTarget:
    namespace: str
    service: str
    port: str | int  # a port name in the slices, or a number

    @property
    def selector(self) -> str:
        return f"{SERVICE_NAME_LABEL}={self.service}"


def parse_service_target(target: str) -> ServiceTarget:
    """``kubernetes:///SERVICE.NAMESPACE:PORT`` (PORT a name or a number)."""
    if not target.startswith(SCHEME):
        raise ValueError(f"expected {SCHEME}SERVICE.NAMESPACE:PORT, got {target!r}")
    host, sep, port = target.removeprefix(SCHEME).rpartition(":")
    service, dot, namespace = host.partition(".")
    if not sep or not port or not service or not dot or not namespace or "." in namespace:
        raise ValueError(f"expected {SCHEME}SERVICE.NAMESPACE:PORT, got {target!r}")
    if port.isdigit() and not 0 < int(port) < 65536:
        raise ValueError(f"port out of range in {target!r}")
    return ServiceTarget(namespace, service, int(port) if port.isdigit() else port)


def _slice_port(endpoint_slice: Mapping[str, Any], wanted: str | int) -> int | None:
    for port in endpoint_slice.get("ports") or ():
        number = port.get("port")
        if not isinstance(number, int):
            continue
        if (isinstance(wanted, int) and number == wanted) or port.get("name") == wanted:
            return number
    return None


def compute_members(
    slices: Iterable[Mapping[str, Any]], port: str | int, role: WorkerRole
) -> tuple[Member, ...]:
    """Members for a Service's EndpointSlices (API JSON), sorted, each address once:
    ready endpoints, and not-ready ones not terminating as starting (an address ready in
    one slice is ready)."""
    addresses: dict[str, bool] = {}  # address -> starting
    for endpoint_slice in slices:
        if endpoint_slice.get("addressType") not in ("IPv4", "IPv6"):
            continue  # FQDN slices name no pod
        number = _slice_port(endpoint_slice, port)
        if number is None:
            continue
        for endpoint in endpoint_slice.get("endpoints") or ():
            conditions = endpoint.get("conditions") or {}
            starting = conditions.get("ready") is False
            if starting and conditions.get("terminating") is True:
                continue
            for address in endpoint.get("addresses") or ():
                key = f"[{address}]:{number}" if ":" in address else f"{address}:{number}"
                addresses[key] = addresses.get(key, True) and starting
    return tuple(Member(a, role, starting=addresses[a]) for a in sorted(addresses))


async def load_api_client() -> kube_client.ApiClient:
    """In a pod, the ServiceAccount's credentials; elsewhere ``$KUBECONFIG`` (tests)."""
    cfg = kube_client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        kube_config.load_incluster_config(client_configuration=cfg)
    else:
        # Read $KUBECONFIG now: kubernetes_asyncio's default is fixed at import time.
        await kube_config.load_kube_config(
            config_file=os.environ.get("KUBECONFIG"), client_configuration=cfg
        )
    return kube_client.ApiClient(configuration=cfg)


class KubeConnection:
    """One API client shared by every pool's watch, created on first use."""

    def __init__(self) -> None:
        self._api: kube_client.ApiClient | None = None
        self._lock = asyncio.Lock()

    async def api(self) -> kube_client.ApiClient:
        async with self._lock:
            if self._api is None:
                self._api = await load_api_client()
            return self._api

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()
            self._api = None


class EndpointSliceMembership:
    """The ready endpoints of one Service, kept current by list + watch."""

    def __init__(
        self,
        connection: KubeConnection,
        target: ServiceTarget,
        role: WorkerRole,
        *,
        initial_timeout_s: float = REQUEST_TIMEOUT_SECONDS,
    ) -> None:
        self._connection = connection
        self._target = target
        self._role = role
        self._initial_timeout_s = initial_timeout_s
        self._slices: dict[str, Manifest] = {}
        self._members: tuple[Member, ...] = ()
        self._listed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._changed: list[Callable[[], None]] = []

    def on_change(self, callback: Callable[[], None]) -> None:
        self._changed.append(callback)

    async def members(self) -> tuple[Member, ...]:
        if self._task is not None and self._task.done() and not self._task.cancelled():
            # Only an unforeseen error ends the watch; start it again, loudly.
            logger.error(
                "EndpointSlice watch of %s died: %r", self._target.service, self._task.exception()
            )
            self._task = None
        if self._task is None:
            self._task = asyncio.create_task(
                self._follow(), name=f"endpointslices-{self._target.service}"
            )
        if not self._listed.is_set():
            # The first round waits for the first list, so a new frontend routes at once.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._initial_timeout_s):
                    await self._listed.wait()
        return self._members

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def _update(self) -> None:
        members = compute_members(self._slices.values(), self._target.port, self._role)
        if members != self._members:
            ready = [m.address for m in members if not m.starting]
            logger.info(
                "%s pool (%s/%s): %d ready worker(s) %s, %d starting",
                self._role.value,
                self._target.namespace,
                self._target.service,
                len(ready),
                ", ".join(ready),
                len(members) - len(ready),
            )
            self._members = members
            for callback in self._changed:
                callback()

    async def _follow(self) -> None:
        pause = RETRY_MIN_SECONDS
        failing = False
        while True:
            try:
                version = await self._list()
                if failing:
                    logger.info("EndpointSlices of %s listed again", self._target.service)
                failing, pause = False, RETRY_MIN_SECONDS
                await self._watch(version)
                continue  # the server ended the watch: relist
            except kube_client.ApiException as exc:
                if exc.status == 410:
                    continue  # our resourceVersion is too old: relist at once
                why = f"{exc.status} {exc.reason}"
            except (aiohttp.ClientError, OSError, TimeoutError, KeyError, ValueError) as exc:
                why = repr(exc)
            if not failing:
                logger.warning(
                    "watching EndpointSlices of %s/%s failed (%s); keeping %d known "
                    "worker(s), retrying",
                    self._target.namespace,
                    self._target.service,
                    why,
                    len(self._members),
                )
            failing = True
            await asyncio.sleep(pause)
            pause = min(pause * 2, RETRY_MAX_SECONDS)

    async def _discovery(self) -> kube_client.DiscoveryV1Api:
        return kube_client.DiscoveryV1Api(await self._connection.api())

    async def _list(self) -> str:
        api = await self._discovery()
        response = await api.list_namespaced_endpoint_slice(
            self._target.namespace,
            label_selector=self._target.selector,
            _preload_content=False,
            _request_timeout=REQUEST_TIMEOUT_SECONDS,
        )
        async with response:
            document = json.loads(await response.read())
        self._slices = {item["metadata"]["name"]: item for item in document.get("items") or ()}
        self._update()
        self._listed.set()
        return str((document.get("metadata") or {}).get("resourceVersion", ""))

    async def _watch(self, resource_version: str) -> None:
        api = await self._discovery()
        # Events as plain JSON, as the list reads them: the client's V1EndpointSlice model
        # refuses a slice whose endpoints are null (a Service with no pod yet, or a
        # LeaderWorkerSet group's before its pods exist), which the API server sends.
        async with kube_watch.Watch(return_type="object") as stream:
            async for event in stream.stream(
                api.list_namespaced_endpoint_slice,
                self._target.namespace,
                label_selector=self._target.selector,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_TIMEOUT_SECONDS,
                _request_timeout=WATCH_TIMEOUT_SECONDS + 30,
            ):
                kind, obj = event["type"], event["raw_object"]
                if kind == "BOOKMARK":
                    continue
                name = obj["metadata"]["name"]
                if kind == "DELETED":
                    self._slices.pop(name, None)
                else:
                    self._slices[name] = obj
                self._update()
