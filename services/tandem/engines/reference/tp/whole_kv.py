"""A tensor-parallel group's KV in the whole model's layout, for handing to other workers.

Each rank's pool holds its own KV heads of every block (``shard``), so no rank holds a
token's row ``[2, kv_heads, head_dim]`` whole, and a worker of another tensor-parallel
size (or another head split) cannot read it. Before a handoff the leader gathers the
followers' shares of the sequence's blocks and writes every rank's heads side by side
into a region of whole blocks: the same block ids as its pool, so the layout the
transport reads is what a TP1 engine's pool would give (``kv_layout``), and a TP1
worker takes it unchanged. The other way, KV another worker prefilled arrives here whole,
and the leader splits it: its own heads into its pool, each follower's over the link.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tandem.engines.reference.config import ReferenceModelConfig
from tandem.engines.reference.kv_pool import allocate_blocks
from tandem.engines.reference.tp.shard import plan_shard

Float32Array = npt.NDArray[np.float32]


class WholeKv:
    def __init__(self, config: ReferenceModelConfig) -> None:
        """``config``: the whole model's (the group's pools have its block count)."""
        size = config.tensor_parallel_size
        self.blocks = allocate_blocks(config)
        self._heads = [plan_shard(config, rank, size).kv_heads for rank in range(size)]
        self._per_head = config.kv_block_size * 2 * config.head_dim * 4

    def region(self) -> memoryview:
        return self.blocks.data.cast("B")

    def share_bytes(self, count: int) -> list[int]:
        """Bytes of ``count`` blocks as each follower holds them (rank 1 first)."""
        return [count * len(heads) * self._per_head for heads in self._heads[1:]]

    def assemble(
        self, blocks: npt.NDArray[np.int32], own: Float32Array, shares: Sequence[bytes]
    ) -> None:
        """Write ``blocks`` whole: the leader's heads from ``own`` (its pool's blocks),
        each follower's from its share, as ``LeaderLink.gather`` returned them."""
        whole = self.blocks
        _, block_size, _, _, head_dim = whole.shape
        parts = [own, *(np.frombuffer(share, dtype=np.float32) for share in shares)]
        for heads, part in zip(self._heads, parts, strict=True):
            shape = (len(blocks), block_size, 2, len(heads), head_dim)
            whole[blocks, :, :, heads.start : heads.stop] = part.reshape(shape)

    def split(self, blocks: npt.NDArray[np.int32]) -> tuple[Float32Array, list[bytes]]:
        """``blocks`` cut back into the ranks' heads: the leader's (for its pool), then
        each follower's share as ``LeaderLink.scatter`` sends it."""
        rows = self.blocks[blocks]
        parts = [np.ascontiguousarray(rows[:, :, :, h.start : h.stop]) for h in self._heads]
        return parts[0], [part.tobytes() for part in parts[1:]]
