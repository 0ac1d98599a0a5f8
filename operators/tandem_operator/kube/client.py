"""A thin Kubernetes client over kubernetes_asyncio's ApiClient, speaking plain dicts.

Why raw paths instead of the generated typed APIs: our own kinds (InferenceCluster,
WorkerPool, LeaderWorkerSet) have no typed API anyway, the reconcile compares JSON with
JSON, and skipping model (de)serialization keeps the operator small at a hundred clusters.
kubernetes_asyncio still does the parts worth reusing: kubeconfig and in-cluster
configuration, TLS, token refresh and the aiohttp connection pool.

Policy, explicit and in one place:

- **apply** is server-side apply with field manager ``tandem-operator`` and ``force=True``
  (we own what we render; a conflicting manager is overridden, as controllers must).
- **404**: ``get`` returns None, ``delete`` returns False; anywhere else it raises
  :class:`NotFound` (e.g. a kind whose CRD is not installed).
- **409**: ``create`` raises :class:`Conflict` (callers that treat "already exists" as
  success catch it); ``replace`` raises it for a stale resourceVersion.
- every request has a timeout; a watch has a connect timeout and a read timeout longer than
  the server-side watch timeout.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import yaml
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration

from tandem_operator import names

logger = logging.getLogger(__name__)

Manifest = dict[str, Any]

DEFAULT_TIMEOUT_SECONDS = 30.0
WATCH_CONNECT_TIMEOUT_SECONDS = 10.0
LIST_PAGE_SIZE = 500


class ApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, reason: str, message: str, kind: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        # The kind the error is about (the Status's details.kind): a 404 for an object in
        # a namespace being deleted names "namespaces".
        self.kind = kind


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    pass


class Gone(ApiError):
    """410: a watch's resourceVersion is too old; relist."""


def _error(status: int, body: bytes) -> ApiError:
    try:
        doc = json.loads(body)
        reason, message = str(doc.get("reason", "")), str(doc.get("message", ""))
        about = str((doc.get("details") or {}).get("kind", ""))
    except (ValueError, AttributeError):
        reason, message, about = "", body.decode(errors="replace")[:500], ""
    error = {404: NotFound, 409: Conflict, 410: Gone}.get(status, ApiError)
    return error(status, reason, message, about)


@dataclass(frozen=True, slots=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [root]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name:
            parts.append(name)
            if subresource:
                parts.append(subresource)
        return "/".join(parts)


INFERENCE_CLUSTERS = Resource("tandem.dev", "v1alpha1", "inferenceclusters", "InferenceCluster")
WORKER_POOLS = Resource("tandem.dev", "v1alpha1", "workerpools", "WorkerPool")
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
LEADER_WORKER_SETS = Resource(
    "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet"
)
SERVICES = Resource("", "v1", "services", "Service")
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap")
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
PODS = Resource("", "v1", "pods", "Pod")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
# NVIDIA's DRA driver for GPUs (multi-node NVLink on GB200); optional.
COMPUTE_DOMAINS = Resource("resource.nvidia.com", "v1beta1", "computedomains", "ComputeDomain")
SECRETS = Resource("", "v1", "secrets", "Secret")
NETWORK_POLICIES = Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")
EVENTS = Resource("", "v1", "events", "Event")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
JOBS = Resource("batch", "v1", "jobs", "Job")

BY_KIND: Mapping[str, Resource] = {
    r.kind: r
    for r in (
        INFERENCE_CLUSTERS,
        WORKER_POOLS,
        DEPLOYMENTS,
        LEADER_WORKER_SETS,
        SERVICES,
        CONFIG_MAPS,
        PDBS,
        PODS,
        SERVICE_ACCOUNTS,
        ROLES,
        ROLE_BINDINGS,
        NODES,
        JOBS,
        COMPUTE_DOMAINS,
        SECRETS,
        NETWORK_POLICIES,
        EVENTS,
        LEASES,
    )
}


def resource_of(obj: Manifest) -> Resource:
    return BY_KIND[obj["kind"]]


class ConfigError(Exception):
    """No usable client configuration; the message names the file(s) and what to do."""


DEFAULT_KUBECONFIG = "~/.kube/config"


def kubeconfig_paths(kubeconfig: str | None) -> list[str]:
    """The files a kubeconfig is read from, as kubectl reads them: ``--kubeconfig``, else
    every entry of $KUBECONFIG, else ~/.kube/config."""
    value = kubeconfig if kubeconfig is not None else os.environ.get("KUBECONFIG")
    if value is None:
        return [DEFAULT_KUBECONFIG]
    return [p for p in value.split(os.pathsep) if p]


def _existing_kubeconfigs(kubeconfig: str | None) -> list[str]:
    paths = kubeconfig_paths(kubeconfig)
    found = [p for p in paths if os.path.isfile(os.path.expanduser(p))]
    if not found:
        where = ", ".join(paths) if paths else "$KUBECONFIG (set, but empty)"
        raise ConfigError(
            f"no kubeconfig at {where}: pass --kubeconfig FILE or set KUBECONFIG (for a dev "
            "cluster: export KUBECONFIG=$(tandem dev cluster up))"
        )
    return found


async def load_configuration(kubeconfig: str | None, in_cluster: bool) -> Configuration:
    """Client configuration: an explicit kubeconfig wins, then in-cluster, then defaults.
    Raises :class:`ConfigError` when none of them is usable."""
    cfg = Configuration()
    if kubeconfig is None and in_cluster:
        try:
            kube_config.load_incluster_config(client_configuration=cfg)
        except kube_config.ConfigException as exc:
            raise ConfigError(f"in-cluster configuration: {exc}") from None
        return cfg
    found = _existing_kubeconfigs(kubeconfig)
    try:
        await kube_config.load_kube_config(
            config_file=os.pathsep.join(found), client_configuration=cfg
        )
    except (kube_config.ConfigException, OSError, ValueError, yaml.YAMLError) as exc:
        detail = " ".join(str(exc).split())  # YAML errors span lines
        raise ConfigError(f"kubeconfig {', '.join(found)}: {detail}") from None
    return cfg


class KubeClient:
    def __init__(self, api: ApiClient, *, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        self._api = api
        self._timeout = timeout

    @classmethod
    async def connect(
        cls, kubeconfig: str | None = None, *, in_cluster: bool = False
    ) -> KubeClient:
        cfg = await load_configuration(kubeconfig, in_cluster)
        return cls(ApiClient(configuration=cfg))

    async def close(self) -> None:
        await self._api.close()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Manifest | None = None,
        content_type: str = "application/json",
        request_timeout: float | tuple[float, float] | None = None,
    ) -> aiohttp.ClientResponse:
        response: aiohttp.ClientResponse = await self._api.call_api(
            path,
            method,
            query_params=query or [],
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=request_timeout if request_timeout is not None else self._timeout,
        )
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Manifest | None = None,
        content_type: str = "application/json",
    ) -> Manifest:
        response = await self._send(method, path, query=query, body=body, content_type=content_type)
        async with response:
            data = await response.read()
            if not 200 <= response.status < 300:
                raise _error(response.status, data)
        if not data:
            return {}
        doc: Manifest = json.loads(data)
        return doc

    # ------------------------------------------------------------------ verbs

    async def apply(
        self,
        obj: Manifest,
        *,
        field_manager: str = names.FIELD_MANAGER,
        force: bool = True,
        subresource: str | None = None,
    ) -> Manifest:
        """Server-side apply ``obj`` (or its ``status`` with subresource="status")."""
        meta = obj["metadata"]
        path = resource_of(obj).path(meta.get("namespace"), meta["name"], subresource)
        query = [("fieldManager", field_manager)]
        if force:
            query.append(("force", "true"))
        return await self.request(
            "PATCH", path, query=query, body=obj, content_type="application/apply-patch+yaml"
        )

    async def merge_patch(
        self, resource: Resource, namespace: str | None, name: str, patch: Manifest
    ) -> Manifest:
        return await self.request(
            "PATCH",
            resource.path(namespace, name),
            body=patch,
            content_type="application/merge-patch+json",
        )

    async def get(self, resource: Resource, namespace: str | None, name: str) -> Manifest | None:
        try:
            return await self.request("GET", resource.path(namespace, name))
        except NotFound:
            return None

    async def create(self, resource: Resource, namespace: str | None, obj: Manifest) -> Manifest:
        return await self.request("POST", resource.path(namespace), body=obj)

    async def replace(self, resource: Resource, namespace: str | None, obj: Manifest) -> Manifest:
        return await self.request(
            "PUT", resource.path(namespace, obj["metadata"]["name"]), body=obj
        )

    async def delete(
        self, resource: Resource, namespace: str | None, name: str, *, uid: str | None = None
    ) -> bool:
        """Delete in the background; False when it was already gone. ``uid`` guards against
        deleting a namesake created after we looked."""
        body: Manifest = {"kind": "DeleteOptions", "apiVersion": "v1"}
        body["propagationPolicy"] = "Background"
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            await self.request("DELETE", resource.path(namespace, name), body=body)
        except NotFound:
            return False
        return True

    async def list(
        self, resource: Resource, namespace: str | None = None, label_selector: str | None = None
    ) -> tuple[list[Manifest], str]:
        """Every item (paginated) and the list's resourceVersion to watch from."""
        items: list[Manifest] = []
        token = ""
        while True:
            query = [("limit", str(LIST_PAGE_SIZE))]
            if label_selector:
                query.append(("labelSelector", label_selector))
            if token:
                query.append(("continue", token))
            page = await self.request("GET", resource.path(namespace), query=query)
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                return items, str(meta.get("resourceVersion", ""))

    async def watch(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[Manifest]:
        """Watch events (``{"type", "object"}``) until the server closes the stream."""
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        if label_selector:
            query.append(("labelSelector", label_selector))
        response = await self._send(
            "GET",
            resource.path(namespace),
            query=query,
            request_timeout=(WATCH_CONNECT_TIMEOUT_SECONDS, float(timeout_seconds + 30)),
        )
        async with response:
            if response.status != 200:
                raise _error(response.status, await response.read())
            buffer = b""
            async for chunk in response.content.iter_any():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        event: Manifest = json.loads(line)
                        if event.get("type") == "ERROR":
                            status = event.get("object") or {}
                            raise _error(int(status.get("code", 500)), json.dumps(status).encode())
                        yield event
