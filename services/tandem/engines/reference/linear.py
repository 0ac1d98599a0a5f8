"""Matrix products whose every row comes out the same whatever else is in the batch.

BLAS picks its kernel from the matrix shapes (OpenBLAS: a gemv for one row, a "small
matrix" kernel below about 10^6 multiply-adds, the blocked kernel above), and different
kernels round differently: the same token's row of ``x @ W`` changes in its last bits
with the number of rows beside it. Greedy decoding amplifies such bits into different
tokens, so a sequence would answer differently alone and in a batch.

``Linear`` therefore only ever calls BLAS with one shape: ``[ROW_TILE, K] @ [K, 64]``.
Rows are cut into tiles of ``row_tile`` (zero-padded) and the weight into column chunks
of ``CHUNK_COLUMNS`` (zero-padded), and numpy's stacked ``matmul`` runs one product per
(chunk, tile) pair, weight chunk outermost so each chunk stays in cache across tiles.
Within a product of fixed shape a row's result depends only on that row (checked by the
batch-invariance tests), so a token's activations are bit-identical alone, in any batch,
in any prefill chunk or as a decode step.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Float32Array = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]

# Output columns per BLAS call: a [K, 64] float32 chunk is 147 KiB at K=576, so it stays in
# L2 while every row tile passes over it.
CHUNK_COLUMNS = 64


class Linear:
    """``x @ weight`` for ``weight`` ``[in_features, out_features]`` (see the module
    docstring); the weight is kept only in its chunked layout."""

    __slots__ = ("_chunks", "in_features", "out_features", "row_tile")

    def __init__(self, weight: Float32Array, row_tile: int) -> None:
        in_features, out_features = weight.shape
        padded = -out_features % CHUNK_COLUMNS
        if padded:
            weight = np.concatenate(
                (weight, np.zeros((in_features, padded), dtype=np.float32)), axis=1
            )
        count = weight.shape[1] // CHUNK_COLUMNS
        # [chunks, in, 64]: each chunk contiguous, as BLAS reads it.
        self._chunks: Float32Array = np.ascontiguousarray(
            weight.reshape(in_features, count, CHUNK_COLUMNS).transpose(1, 0, 2),
            dtype=np.float32,
        )
        self.in_features = in_features
        self.out_features = out_features
        self.row_tile = row_tile

    @property
    def nbytes(self) -> int:
        return int(self._chunks.nbytes)

    def __call__(self, x: Float32Array) -> Float32Array:
        """``[rows, in] -> [rows, out]``."""
        rows = x.shape[0]
        tile = self.row_tile
        tiles = -(-rows // tile)
        padded = np.zeros((tiles * tile, self.in_features), dtype=np.float32)
        padded[:rows] = x
        # [1, tiles, tile, in] @ [chunks, 1, in, 64] -> [chunks, tiles, tile, 64]
        products = np.matmul(padded.reshape(1, tiles, tile, -1), self._chunks[:, None])
        out = products.transpose(1, 2, 0, 3).reshape(tiles * tile, -1)
        result: Float32Array = np.ascontiguousarray(out[:rows, : self.out_features])
        return result

    def columns(self, indices: IntArray) -> Float32Array:
        """Columns ``indices`` of the weight as rows ``[len(indices), in]``: the input
        embedding of a model whose output projection is tied to it."""
        rows: Float32Array = self._chunks[indices // CHUNK_COLUMNS, :, indices % CHUNK_COLUMNS]
        return rows

    def dense(self) -> Float32Array:
        """The weight as one ``[in, out]`` array (a copy; for tests and reference code)."""
        flat = self._chunks.transpose(1, 0, 2).reshape(self.in_features, -1)
        dense: Float32Array = np.ascontiguousarray(flat[:, : self.out_features])
        return dense
