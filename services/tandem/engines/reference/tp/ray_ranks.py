"""Follower ranks placed by Ray: one actor per other node of the worker's Ray cluster (one
node per pod of its LeaderWorkerSet group, started by ``tandem.worker.ray_launch``), each
loading the model, keeping its shard and serving the leader's steps over the rank link.

Ray places and supervises the ranks; the steps and reductions go over the link (a TCP
connection per follower), not through Ray's object store, as NCCL carries a GPU group's
collectives under Ray-launched engines. The group's secret travels in the actors'
arguments, over Ray's own (token-authenticated) connections.

``ray`` is the optional ``multinode`` extra: imported only when a worker has
``tensor_parallel_size > 1``.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tandem.engines.base import EngineError
from tandem.engines.ray_nodes import RANK_PORT_ENV, wait_for_nodes
from tandem.engines.reference.kv_pool import SequenceKv
from tandem.engines.reference.loading import load_model
from tandem.engines.reference.model import Segment
from tandem.engines.reference.tp.follower import FollowerRank
from tandem.engines.reference.tp.link import LeaderLink
from tandem.engines.reference.tp.step import StepSegment, encode_step

logger = logging.getLogger(__name__)

# How long the leader waits for the follower nodes to join its Ray cluster, and for the
# follower ranks to load the model and listen.
JOIN_TIMEOUT_S = 120.0


class _RankActor:
    """Runs in a Ray worker process on a follower node (wrapped by ``ray.remote``)."""

    def __init__(self, options: Mapping[str, object], model_source: str | None, rank: int) -> None:
        config, weights = load_model(options, model_source)
        self._rank = FollowerRank(config, weights, rank)

    def listen(self, host: str, port: int) -> int:
        return self._rank.listen(host, port)

    def serve(self, secret: bytes) -> int:
        return self._rank.serve(secret)


@dataclass(slots=True)
class RankGroup:
    """The leader's handle on its followers: the link, and the actors (dropping their
    handles would let Ray end them)."""

    link: LeaderLink
    actors: Sequence[Any]

    def send_step(self, segments: Sequence[Segment]) -> None:
        step = []
        for segment in segments:
            assert isinstance(segment.kv, SequenceKv), "the leader runs on its own pool"
            step.append(StepSegment(segment.tokens, segment.start, segment.kv.tables()))
        self.link.send_step(encode_step(step))

    def close(self) -> None:
        self.link.close()


def start_ranks(options: Mapping[str, object], model_source: str | None, size: int) -> RankGroup:
    """Followers 1..size-1 on the other nodes of the Ray cluster at ``RAY_ADDRESS`` (or
    the one this node belongs to)."""
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError as exc:
        raise EngineError(
            f"tensor_parallel_size {size} needs Ray: pip install 'tandem[multinode]'"
        ) from exc
    address = os.environ.get("RAY_ADDRESS", "auto")
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True)
    except ConnectionError as exc:
        raise EngineError(
            f"tensor_parallel_size {size} needs a Ray cluster, and none answered at "
            f"RAY_ADDRESS={address} with this process's RAY_AUTH_TOKEN: start the worker "
            f"under `python -m tandem.worker.ray_launch leader` ({exc})"
        ) from exc
    own = ray.get_runtime_context().get_node_id()
    nodes = wait_for_nodes(ray, size, JOIN_TIMEOUT_S)
    followers = [node for node in nodes if node.node_id != own][: size - 1]
    remote = ray.remote(num_cpus=0, max_restarts=0)(_RankActor)
    actors: list[Any] = [
        remote.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node.node_id, soft=False)
        ).remote(dict(options), model_source, rank)
        for rank, node in enumerate(followers, start=1)
    ]
    hosts = [node.address for node in followers]
    port = int(os.environ.get(RANK_PORT_ENV, "0"))
    try:
        ports = ray.get(
            [actor.listen.remote(host, port) for actor, host in zip(actors, hosts, strict=True)],
            timeout=JOIN_TIMEOUT_S,
        )
    except (ray.exceptions.RayError, TimeoutError) as exc:
        raise EngineError(f"tensor-parallel follower ranks did not start: {exc}") from exc
    secret = secrets.token_bytes(32)
    for actor in actors:  # each serves until the leader closes the link
        actor.serve.remote(secret)
    addresses = list(zip(hosts, ports, strict=True))
    link = LeaderLink.connect(addresses, secret)
    logger.info(
        "tensor-parallel group of %s: followers at %s",
        size,
        ", ".join(f"{host}:{port}" for host, port in addresses),
    )
    return RankGroup(link, actors)
