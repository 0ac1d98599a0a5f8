"""KV offload: tiers below an engine's device KV pool (host memory, then local disk
through NIXL's file backend) that keep evicted prefix-cache blocks and give them back on a
prefix hit.

- ``tiers``: where each offloaded block lives and which moves keep every tier within its
  budget; pure bookkeeping, no bytes.
- ``records``: a block's content digest and its on-disk header, and the check that a
  block read back is the one written.
- ``disk``: the disk tier's file, read and written through NIXL's POSIX backend.
- ``store``: the I/O shell an engine calls: carries the moves out, onboards blocks,
  counts what happened (``OffloadStats``).
"""

from tandem.kv.events import Tier
from tandem.kv.offload.stats import OffloadStats
from tandem.kv.offload.store import OffloadSettings, OffloadStore

__all__ = ["OffloadSettings", "OffloadStats", "OffloadStore", "Tier"]
