"""One InferenceCluster ``c`` in namespace ``ns`` reconciled against the fake API server
(test_planning_reconcile's, also answering reads by name): the stand-in the credential
tests (MPI keys, Ray token) reconcile their clusters in."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import Any, Generic, TypeVar

from tandem.api.v1alpha1 import InferenceCluster
from tandem_operator.controller import Reconciler
from tandem_operator.kube.client import Resource
from tandem_operator.kube.informer import Caches, Store
from tandem_operator.render.pods import RenderSettings

from .test_planning_reconcile import KINDS, FakeApiServer

Json = dict[str, Any]
T = TypeVar("T")


class SecretReadingApiServer(FakeApiServer):
    """Also answers a read by name, as the API server does (None: not found)."""

    def __init__(self) -> None:
        super().__init__()
        self.gets: list[tuple[str, str]] = []

    async def get(self, resource: Resource, namespace: str | None, name: str) -> Json | None:
        self.gets.append((resource.kind, name))
        return self.objects.get((resource.kind, name))


class Counted(Generic[T]):
    """A generator of fresh credentials, counting what it made."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self.made = 0

    def __call__(self) -> T:
        self.made += 1
        return self._make()


class ClusterWorld:
    def __init__(
        self,
        cr: InferenceCluster,
        now: datetime,
        server: SecretReadingApiServer | None = None,
        **reconciler: Any,
    ) -> None:
        """``reconciler``: the Reconciler's keyword arguments besides its fakes and clock
        (the credential generators, the propagation time)."""
        self.server = server or SecretReadingApiServer()
        self.caches = Caches({kind: Store() for kind in KINDS})
        self.now = now
        self.version = 0
        self.cluster: Json = {
            "apiVersion": "tandem.dev/v1alpha1",
            "kind": "InferenceCluster",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u", "generation": 1},
            "spec": cr.spec.to_wire(),
        }
        self.publish()
        self.reconciler = Reconciler(
            self.server,  # type: ignore[arg-type]
            self.caches,
            RenderSettings(),
            identity="test",
            now=lambda: self.now,
            **reconciler,
        )

    def publish(self) -> None:
        """The cluster object as it now is, in the API server and the cache."""
        self.version += 1
        self.cluster["metadata"]["resourceVersion"] = str(self.version)
        self.server.objects[("InferenceCluster", "c")] = self.cluster
        self.caches.of("InferenceCluster").upsert(self.cluster)

    async def reconcile(self) -> float | None:
        return await asyncio.wait_for(self.reconciler.reconcile(("ns", "c")), 10)

    def condition(self, kind: str) -> tuple[str, str, str]:
        status = self.server.objects[("InferenceCluster", "c")]["status"]
        found = next(c for c in status["conditions"] if c["type"] == kind)
        return found["status"], found["reason"], found["message"]
