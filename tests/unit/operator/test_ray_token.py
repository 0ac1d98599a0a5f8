"""The token a cluster's Ray groups authenticate with (ray_token.py): made once by the
reconcile for a cluster with a Ray group, owned by it, kept across reconciles, never
made for other clusters, and someone else's Secret of that name left alone."""

from __future__ import annotations

import base64
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]

from tandem.api.v1alpha1 import InferenceCluster
from tandem_operator import names, reasons
from tandem_operator.render.ray_token import generate_token, read_ray_token

from .cluster_world import ClusterWorld, Counted
from .test_gpu_render import load, multi_node_cluster
from .test_mpi_keys import NOW, hand_made

Json = dict[str, Any]
TOKEN = ("Secret", "c-ray-token")


class World(ClusterWorld):
    def __init__(self, cr: InferenceCluster) -> None:
        self.maker = Counted(generate_token)
        super().__init__(cr, NOW, new_ray_token=self.maker)


async def test_a_ray_cluster_gets_one_token_owned_by_it_and_others_get_none() -> None:
    world = World(multi_node_cluster("ray"))
    await world.reconcile()
    secret = world.server.objects[TOKEN]
    applied = {key: value for key, value in secret.items() if key != "status"}  # the fake's
    kubernetes_validate.validate(applied, "1.33", strict=True)
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "u"
    assert secret["metadata"]["labels"][names.LABEL_MANAGED_BY] == names.MANAGED_BY
    token = read_ray_token(secret)
    assert token is not None and len(token) == 64 and world.maker.made == 1
    assert ("LeaderWorkerSet", "c-decode") in world.server.objects
    await world.reconcile()
    assert read_ray_token(world.server.objects[TOKEN]) == token and world.maker.made == 1
    # MPI worlds and one-node pools run no Ray.
    for other in (multi_node_cluster("mpi"), load("gpt-oss-120b-gb200.yaml")):
        quiet = World(other)
        await quiet.reconcile()
        assert TOKEN not in quiet.server.objects and quiet.maker.made == 0


async def test_someone_else_s_secret_is_left_alone_and_nothing_is_applied() -> None:
    world = World(multi_node_cluster("ray"))
    theirs = hand_made(token=b"theirs")
    theirs["metadata"]["name"] = "c-ray-token"
    world.server.objects[TOKEN] = theirs
    await world.reconcile()
    assert base64.b64decode(world.server.objects[TOKEN]["data"]["token"]) == b"theirs"
    assert ("LeaderWorkerSet", "c-decode") not in world.server.objects
    status, reason, message = world.condition(reasons.DEGRADED)
    assert (status, reason) == ("True", reasons.RAY_SECRET_CONFLICT)
    assert "kubectl -n ns delete secret c-ray-token" in message
    del world.server.objects[TOKEN]
    await world.reconcile()
    assert world.maker.made == 1 and ("LeaderWorkerSet", "c-decode") in world.server.objects
