"""The frontend's in-cluster membership on the real API server, with its real identity.

A Service without a selector gets EndpointSlices we write by hand (so the test decides
readiness and termination); the membership watches them with a token of a
ServiceAccount bound to exactly the Role the operator renders for frontends.

Nothing dials the endpoint addresses: only the API server is contacted. They come from
TEST-NET-1 (192.0.2.0/24, reserved for documentation) because the API server refuses
loopback addresses in EndpointSlices ("may not be in the loopback range").
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tandem.devcluster import DevCluster
from tandem.router.endpoint_slices import EndpointSliceMembership, KubeConnection, ServiceTarget
from tandem.router.policy import WorkerRole
from tandem_dev.harness import write_token_kubeconfig
from tandem_operator.render.access import render_frontend_access

pytestmark = [pytest.mark.k8s, pytest.mark.parallel]

SERVICE = "pool"
FRONTEND = "pool-frontend"
Json = dict[str, Any]


def endpoint(address: str, *, ready: bool, terminating: bool = False) -> Json:
    return {
        "addresses": [address],
        "conditions": {"ready": ready, "serving": ready or terminating, "terminating": terminating},
    }


def endpoint_slice(namespace: str, name: str, *endpoints: Json) -> Json:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "kubernetes.io/service-name": SERVICE,
                # Not the endpointslice controller's: it leaves these alone.
                "endpointslice.kubernetes.io/managed-by": "tandem-e2e",
            },
        },
        "addressType": "IPv4",
        "ports": [{"name": "grpc", "port": 50051, "protocol": "TCP"}],
        "endpoints": list(endpoints),
    }


@pytest.fixture
def namespace(k8s_cluster: DevCluster) -> Iterator[str]:
    name = f"es-{uuid.uuid4().hex[:6]}"
    k8s_cluster.kubectl("create", "namespace", name)
    yield name
    k8s_cluster.kubectl("delete", "namespace", name, "--wait=false")


@pytest.fixture
def frontend_kubeconfig(
    k8s_cluster: DevCluster, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A kubeconfig with a token of a ServiceAccount holding the rendered frontend Role."""
    meta = {"name": FRONTEND, "namespace": namespace, "labels": {"app": "e2e"}}
    objects = render_frontend_access(meta)
    k8s_cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    )
    token = k8s_cluster.kubectl("create", "token", FRONTEND, "-n", namespace).stdout.strip()
    path = write_token_kubeconfig(k8s_cluster.kubeconfig, token, tmp_path / "frontend.kubeconfig")
    # What load_api_client reads outside a pod.
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return path


def apply(cluster: DevCluster, obj: Json) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))


async def eventually(check: Callable[[], Any], what: str, within: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def test_ready_and_starting_endpoints_are_members_and_follow_changes(
    k8s_cluster: DevCluster, namespace: str, frontend_kubeconfig: Path
) -> None:
    apply(
        k8s_cluster,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": namespace},
            "spec": {"clusterIP": "None", "ports": [{"name": "grpc", "port": 50051}]},
        },
    )
    apply(
        k8s_cluster,
        endpoint_slice(
            namespace,
            "pool-a",
            endpoint("192.0.2.11", ready=True),
            endpoint("192.0.2.12", ready=False),  # still starting
        ),
    )
    connection = KubeConnection()
    membership = EndpointSliceMembership(
        connection, ServiceTarget(namespace, SERVICE, "grpc"), WorkerRole.DECODE
    )

    async def addresses() -> list[str]:
        """Members' addresses, a starting one's marked " starting"."""
        return [m.address + " starting" * m.starting for m in await membership.members()]

    try:
        # The first call waits for the initial list; the not-ready endpoint that is not
        # terminating is a worker starting: known, never routed to.
        assert await addresses() == ["192.0.2.11:50051", "192.0.2.12:50051 starting"]
        # The second worker turns ready, the first terminates (a scale-down or rollout):
        # only the ready one remains a member.
        apply(
            k8s_cluster,
            endpoint_slice(
                namespace,
                "pool-a",
                endpoint("192.0.2.11", ready=False, terminating=True),
                endpoint("192.0.2.12", ready=True),
            ),
        )
        await eventually(
            lambda: _equals(addresses, ["192.0.2.12:50051"]), "the watch to see the change"
        )
        # A second slice adds to the first; deleting one removes only its endpoints.
        apply(k8s_cluster, endpoint_slice(namespace, "pool-b", endpoint("192.0.2.13", ready=True)))
        await eventually(
            lambda: _equals(addresses, ["192.0.2.12:50051", "192.0.2.13:50051"]), "slice pool-b"
        )
        k8s_cluster.kubectl("delete", "endpointslice", "pool-a", "-n", namespace)
        await eventually(lambda: _equals(addresses, ["192.0.2.13:50051"]), "pool-a deleted")
    finally:
        await membership.close()
        await connection.close()


async def _equals(read: Callable[[], Any], expected: list[str]) -> bool:
    return bool(await read() == expected)


def test_the_frontend_identity_can_do_nothing_else(
    k8s_cluster: DevCluster, namespace: str, frontend_kubeconfig: Path
) -> None:
    identity = f"system:serviceaccount:{namespace}:{FRONTEND}"

    def can_i(*args: str) -> str:
        result = k8s_cluster.kubectl("auth", "can-i", f"--as={identity}", *args, check=False)
        return result.stdout.strip()

    assert can_i("list", "endpointslices.discovery.k8s.io", "-n", namespace) == "yes"
    assert can_i("watch", "endpointslices.discovery.k8s.io", "-n", namespace) == "yes"
    # Not in another namespace, not other verbs, not other kinds.
    assert can_i("list", "endpointslices.discovery.k8s.io", "-n", "default") == "no"
    assert can_i("create", "endpointslices.discovery.k8s.io", "-n", namespace) == "no"
    assert can_i("get", "endpointslices.discovery.k8s.io", "-n", namespace) == "no"
    for resource in ("pods", "secrets", "services", "configmaps", "inferenceclusters.tandem.dev"):
        assert can_i("list", resource, "-n", namespace) == "no", resource
