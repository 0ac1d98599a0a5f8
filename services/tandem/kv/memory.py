"""Views of engine KV regions as flat bytes, and their addresses for RDMA-style backends."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tandem.kv.errors import KvRangeError


def as_byte_views(regions: Sequence[memoryview]) -> tuple[memoryview, ...]:
    """Flat, 1-D unsigned-byte views of each region; rejects non-contiguous memory."""
    views = []
    for i, region in enumerate(regions):
        if not region.c_contiguous:
            raise KvRangeError(f"KV region {i} is not C-contiguous; it cannot be registered")
        views.append(region.cast("B") if (region.format, region.ndim) != ("B", 1) else region)
    return tuple(views)


def region_address(view: memoryview) -> int:
    """The address of the first byte of ``view`` (the memory stays owned by its exporter)."""
    return int(np.frombuffer(view, dtype=np.uint8).ctypes.data)
