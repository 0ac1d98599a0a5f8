"""A follower rank: its shard of the model, a KV pool mirroring the leader's, and the loop
that runs each step the leader sends (layers only: the leader alone samples), answers
each gather with its share of the blocks asked for and writes each scatter's share."""

from __future__ import annotations

import logging
import socket

import numpy as np
from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

from tandem.engines.reference.config import ReferenceModelConfig
from tandem.engines.reference.kv_pool import allocate_blocks
from tandem.engines.reference.model import ReferenceModel
from tandem.engines.reference.tp.link import GATHER, SCATTER, FollowerLink
from tandem.engines.reference.tp.shard import plan_shard, shard_config, shard_weights
from tandem.engines.reference.tp.step import decode_step, to_model_segments
from tandem.engines.reference.weights import ModelWeights

logger = logging.getLogger(__name__)


class FollowerRank:
    def __init__(self, config: ReferenceModelConfig, weights: ModelWeights, rank: int) -> None:
        """``config`` and ``weights`` are the whole model's, as the leader loaded them."""
        threadpool_limits(limits=config.blas_threads, user_api="blas")
        shard = plan_shard(config, rank, config.tensor_parallel_size)
        self.rank = rank
        self._config = shard_config(config, shard)
        self._weights = shard_weights(weights, config, shard)
        self._pool = allocate_blocks(self._config)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)

    def listen(self, host: str, port: int = 0) -> int:
        """Opens the port the leader connects to on ``host`` (its node's address); returns
        it."""
        self._listener.bind((host, port))
        self._listener.listen(1)
        bound: int = self._listener.getsockname()[1]
        return bound

    def serve(self, secret: bytes) -> int:
        """Runs the leader's steps until it closes the link; returns how many ran."""
        link = FollowerLink.accept(self._listener, secret)
        self._listener.close()
        model = ReferenceModel(self._config, self._weights, reduce=link.reduce)
        steps = 0
        try:
            while (request := link.receive_request()) is not None:
                kind, body = request
                if kind == GATHER:
                    link.send_share(self._pool[np.frombuffer(body, dtype=np.int32)])
                    continue
                if kind == SCATTER:
                    blocks, share = link.read_scatter(body)
                    self._pool[blocks] = share.reshape(len(blocks), *self._pool.shape[1:])
                    continue
                segments = decode_step(body)
                bounds = np.cumsum([0, *(len(s.tokens) for s in segments)])
                model.run_layers(to_model_segments(segments, self._pool), bounds)
                steps += 1
        finally:
            link.close()
        logger.info(
            "tensor-parallel rank %s: the leader closed the link after %s steps", self.rank, steps
        )
        return steps
