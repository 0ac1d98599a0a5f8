"""Pure checks and planning for byte-range copies between two sets of KV regions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tandem.engines.base import KvRange
from tandem.kv.errors import KvRangeError


@dataclass(frozen=True, slots=True)
class Segment:
    """One descriptor of a transfer: copy ``remote`` into ``local`` (same length)."""

    remote: KvRange
    local: KvRange

    @property
    def length(self) -> int:
        return self.local.length


def check_ranges(ranges: Sequence[KvRange], region_sizes: Sequence[int], side: str) -> int:
    """Raise KvRangeError unless every range lies inside a region; return the byte total.

    ``side`` ("local", "remote", a peer name) only makes the message useful.
    """
    total = 0
    for i, r in enumerate(ranges):
        if not 0 <= r.region < len(region_sizes):
            raise KvRangeError(
                f"{side} range #{i} names region {r.region}, "
                f"but only {len(region_sizes)} region(s) are registered"
            )
        size = region_sizes[r.region]
        if r.offset < 0 or r.length < 0 or r.offset + r.length > size:
            raise KvRangeError(
                f"{side} range #{i} [{r.offset}, {r.offset + r.length}) is outside "
                f"region {r.region} of {size} bytes"
            )
        total += r.length
    return total


def plan_segments(remote: Sequence[KvRange], local: Sequence[KvRange]) -> list[Segment]:
    """Pair remote with local ranges (index by index) and merge neighbours.

    Two consecutive pairs merge when both their remote and their local ranges are
    adjacent in the same region: fewer descriptors make transfers faster. Empty ranges
    are dropped. Raises KvRangeError when the lists disagree in count or lengths.
    """
    if len(remote) != len(local):
        raise KvRangeError(
            f"remote has {len(remote)} ranges but local has {len(local)}; layouts disagree"
        )
    segments: list[Segment] = []
    for i, (r, loc) in enumerate(zip(remote, local, strict=True)):
        if r.length != loc.length:
            raise KvRangeError(f"range #{i}: remote length {r.length} != local length {loc.length}")
        if r.length == 0:
            continue
        if segments and _extends(segments[-1], r, loc):
            last = segments[-1]
            segments[-1] = Segment(
                KvRange(last.remote.region, last.remote.offset, last.remote.length + r.length),
                KvRange(last.local.region, last.local.offset, last.local.length + loc.length),
            )
        else:
            segments.append(Segment(r, loc))
    return segments


def _extends(last: Segment, remote: KvRange, local: KvRange) -> bool:
    return (
        last.remote.region == remote.region
        and last.remote.offset + last.remote.length == remote.offset
        and last.local.region == local.region
        and last.local.offset + last.local.length == local.offset
    )
