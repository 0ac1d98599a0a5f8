"""List+watch caches of the kinds the operator reads (client-go's informer, small).

Each :class:`Informer` lists once, then watches from the list's resourceVersion; on
``410 Gone`` or a broken stream it relists (with backoff) and reconciles its store. Every
change calls ``on_change(old, new)`` so the manager can enqueue the owning cluster.

Stored objects are slimmed (no managedFields unless asked for, no last-applied
annotation): at a hundred clusters the cache is the operator's largest data structure.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import aiohttp

from tandem_operator import metrics, names
from tandem_operator.kube.client import ApiError, Gone, KubeClient, NotFound, Resource
from tandem_operator.problems import RecurringProblem

logger = logging.getLogger(__name__)

Manifest = dict[str, Any]
Key = tuple[str, str]  # (namespace, name)
ChangeHandler = Callable[[Manifest | None, Manifest | None], None]

WATCH_TIMEOUT_SECONDS = 300
RETRY_MIN_SECONDS = 0.5
RETRY_MAX_SECONDS = 30.0
MISSING_API_POLL_SECONDS = 30.0
# A required kind not served yet (its CRD about to be installed): look again soon.
MISSING_REQUIRED_API_POLL_SECONDS = 5.0

_DROPPED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"


def key_of(obj: Manifest) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


def _resource_version(obj: Manifest | None) -> int | None:
    try:
        return int(obj["metadata"]["resourceVersion"]) if obj else None
    except (KeyError, TypeError, ValueError):
        return None


class Store:
    """Objects by (namespace, name), with an index by the owning cluster label."""

    def __init__(
        self, *, api_version: str = "", kind: str = "", keep_managed_fields: bool = False
    ) -> None:
        self._api_version = api_version
        self._kind = kind
        self._objects: dict[Key, Manifest] = {}
        self._by_cluster: dict[Key, set[str]] = {}
        self._keep_managed_fields = keep_managed_fields

    def __len__(self) -> int:
        return len(self._objects)

    def get(self, namespace: str, name: str) -> Manifest | None:
        return self._objects.get((namespace, name))

    def items(self) -> Iterable[Manifest]:
        return list(self._objects.values())

    def for_cluster(self, namespace: str, cluster: str) -> list[Manifest]:
        names_ = self._by_cluster.get((namespace, cluster), set())
        return [
            self._objects[(namespace, n)] for n in sorted(names_) if (namespace, n) in self._objects
        ]

    def _slim(self, obj: Manifest) -> Manifest:
        meta = dict(obj.get("metadata") or {})
        if not self._keep_managed_fields:
            meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if annotations and _DROPPED_ANNOTATION in annotations:
            meta["annotations"] = {k: v for k, v in annotations.items() if k != _DROPPED_ANNOTATION}
        out = {**obj, "metadata": meta}
        # List items carry no apiVersion/kind; watch events and apply results do.
        if self._kind:
            out["apiVersion"], out["kind"] = self._api_version, self._kind
        return out

    def _cluster(self, obj: Manifest) -> str | None:
        value = (obj["metadata"].get("labels") or {}).get(names.LABEL_CLUSTER)
        return value if isinstance(value, str) else None

    def upsert(self, obj: Manifest) -> Manifest | None:
        """Store ``obj``; returns the previous object."""
        obj = self._slim(obj)
        key = key_of(obj)
        old = self._objects.get(key)
        if old is not None:
            self._unindex(key, old)
        self._objects[key] = obj
        cluster = self._cluster(obj)
        if cluster:
            self._by_cluster.setdefault((key[0], cluster), set()).add(key[1])
        return old

    def upsert_if_newer(self, obj: Manifest) -> bool:
        """Write-through of an object we just wrote; never regress past a newer watch event."""
        current = self._objects.get(key_of(obj))
        new_rv, old_rv = _resource_version(obj), _resource_version(current)
        if new_rv is not None and old_rv is not None and new_rv <= old_rv:
            return False
        self.upsert(obj)
        return True

    def remove(self, namespace: str, name: str) -> Manifest | None:
        old = self._objects.pop((namespace, name), None)
        if old is not None:
            self._unindex((namespace, name), old)
        return old

    def _unindex(self, key: Key, obj: Manifest) -> None:
        cluster = self._cluster(obj)
        if cluster:
            bucket = self._by_cluster.get((key[0], cluster))
            if bucket is not None:
                bucket.discard(key[1])
                if not bucket:
                    del self._by_cluster[(key[0], cluster)]

    def replace_all(
        self, objects: Iterable[Manifest], namespace: str | None = None
    ) -> list[tuple[Manifest | None, Manifest | None]]:
        """Swap in a fresh list of ``namespace``'s objects (None: every namespace's);
        returns the (old, new) changes it implies. Informers of several namespaces
        share one store, each replacing only its own part."""
        fresh = {key_of(o): o for o in objects}
        changes: list[tuple[Manifest | None, Manifest | None]] = []
        for key in list(self._objects):
            if key not in fresh and namespace in (None, key[0]):
                changes.append((self.remove(*key), None))
        for obj in fresh.values():
            old = self.upsert(obj)
            if old is None or old["metadata"].get("resourceVersion") != obj["metadata"].get(
                "resourceVersion"
            ):
                changes.append((old, self.get(*key_of(obj))))
        return changes


class Informer:
    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        namespace: str | None,
        label_selector: str | None = None,
        on_change: ChangeHandler,
        keep_managed_fields: bool = False,
        optional: bool = False,
        missing_message: str | None = None,
        store: Store | None = None,
    ) -> None:
        """``optional``: a kind the API server may not serve (its CRD absent): the store
        stays empty and counts as synced. A required kind that is not served is waited
        for, ``missing_message`` (what to install) logged once, and never counts as synced.
        ``store``: another namespace's informer's store of the same kind, to share."""
        self.resource = resource
        if store is None:  # (an empty Store is falsy: no `or` here)
            store = Store(
                api_version=resource.api_version,
                kind=resource.kind,
                keep_managed_fields=keep_managed_fields,
            )
        self.store = store
        self.synced = asyncio.Event()
        self.available = True  # False while an optional kind's API is not served
        self._client = client
        self._namespace = namespace
        self._selector = label_selector
        self._on_change = on_change
        self._optional = optional
        group = f".{resource.group}" if resource.group else ""
        self._missing_message = missing_message or (
            f"{resource.plural}{group} is not served by the API server; waiting for it"
        )
        self._problem = RecurringProblem(logger)

    def _notify(self, changes: Iterable[tuple[Manifest | None, Manifest | None]]) -> None:
        for old, new in changes:
            self._on_change(old, new)

    async def _list(self) -> str:
        items, version = await self._client.list(self.resource, self._namespace, self._selector)
        self._notify(self.store.replace_all(items, self._namespace))
        self.available = True
        self.synced.set()
        self._problem.resolve(f"watching {self.resource.plural}")
        return version

    async def _watch(self, version: str) -> str:
        """Follow the watch until the server ends it; returns the last version seen."""
        async for event in self._client.watch(
            self.resource,
            self._namespace,
            resource_version=version,
            label_selector=self._selector,
            timeout_seconds=WATCH_TIMEOUT_SECONDS,
        ):
            obj = event.get("object") or {}
            version = str(obj.get("metadata", {}).get("resourceVersion", version))
            kind = event.get("type")
            if kind == "BOOKMARK":
                continue
            if kind == "DELETED":
                old = self.store.remove(*key_of(obj))
                self._on_change(old, None)
            else:
                old = self.store.upsert(obj)
                self._on_change(old, self.store.get(*key_of(obj)))
        return version

    async def run(self) -> None:
        """List, then watch forever; relist after errors with exponential backoff."""
        delay = RETRY_MIN_SECONDS
        version: str | None = None
        while True:
            try:
                if version is None:
                    version = await self._list()
                version = await self._watch(version)
                delay = RETRY_MIN_SECONDS
                continue
            except Gone:
                version = None  # too old: relist
                continue
            except NotFound:
                # The kind is not served (e.g. its CRD is not installed): look again later.
                self.available = False
                version = None
                if self._optional:
                    self.synced.set()
                    await asyncio.sleep(MISSING_API_POLL_SECONDS)
                else:
                    self._problem.report(self._missing_message)
                    await asyncio.sleep(MISSING_REQUIRED_API_POLL_SECONDS)
                continue
            except (ApiError, aiohttp.ClientError, TimeoutError, ValueError) as exc:
                metrics.WATCH_RESTARTS.labels(self.resource.kind).inc()
                self._problem.report(f"watch {self.resource.plural} failed ({exc}); retrying")
                logger.debug("watch %s: next try in %.1fs", self.resource.plural, delay)
                version = None
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_SECONDS)


@dataclass
class Caches:
    """The informers' stores, by kind."""

    stores: dict[str, Store]

    def of(self, kind: str) -> Store:
        return self.stores[kind]
