"""A cluster whose namespace is deleted while it reconciles: the applies fail with 404s
naming the namespace, which are API errors the manager retries with backoff (the next
reconcile finds the cluster gone), not a missing CRD. Seen in the e2e tier: the 404 of the
profiling Job's apply surfaced as KindNotServed, which nothing there catches, and the
operator's reconcile task died of it."""

from __future__ import annotations

from typing import Any

import pytest

from tandem_operator.kube.client import NotFound

from .cluster_world import ClusterWorld, SecretReadingApiServer
from .test_gpu_render import multi_node_cluster
from .test_mpi_keys import NOW

Json = dict[str, Any]


class NamespaceGoingAway(SecretReadingApiServer):
    """Answers every apply as kube-apiserver does once the namespace is being deleted."""

    async def apply(self, obj: Json, **kwargs: Any) -> Json:
        message = 'namespaces "ns" not found'
        raise NotFound(404, "NotFound", message, "namespaces")


async def test_a_namespace_deleted_under_a_reconcile_is_an_api_error_not_a_missing_kind() -> None:
    world = ClusterWorld(multi_node_cluster("ray"), NOW, server=NamespaceGoingAway())
    with pytest.raises(NotFound, match="namespaces"):
        await world.reconcile()
