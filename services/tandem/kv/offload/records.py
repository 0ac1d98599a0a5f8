"""A block's identity in the tiers: its content digest, and the header written before it
on disk, so that a block read back is checked to be the one that was written.

The digest (BLAKE2b, 16 bytes) is taken of the block's bytes when it leaves the device
pool and travels with it; onboarding recomputes it over the bytes that came back. The
disk header also names the block (its ``block_hash``) and the payload length, so a slot
that now holds another block (*stale*), a header or payload cut short (*torn*) and
flipped bits (*corrupt*) are each told apart in the log; all three mean recompute.
"""

from __future__ import annotations

import enum
import hashlib
import struct
from collections.abc import Iterable

MAGIC = b"TNDMKV01"
HEADER = struct.Struct("<8sQQ16s")  # magic, block_hash, payload bytes, digest
DIGEST_BYTES = 16


class Damage(enum.StrEnum):
    TORN = "torn"
    STALE = "stale"
    CORRUPT = "corrupt"


def compute_digest(chunks: Iterable[memoryview]) -> bytes:
    """Digest of a block's bytes, given as consecutive chunks (one per layer)."""
    digest = hashlib.blake2b(digest_size=DIGEST_BYTES)
    for chunk in chunks:
        digest.update(chunk)
    return digest.digest()


def pack_header(block_hash: int, payload_bytes: int, digest: bytes) -> bytes:
    return HEADER.pack(MAGIC, block_hash, payload_bytes, digest)


def check_header(
    header: bytes, block_hash: int, payload_bytes: int, digest: bytes
) -> Damage | None:
    """What is wrong with a header read back for ``block_hash``, if anything."""
    magic, stored_hash, stored_bytes, stored_digest = HEADER.unpack(header)
    if magic != MAGIC or stored_bytes != payload_bytes:
        return Damage.TORN
    if stored_hash != block_hash or stored_digest != digest:
        return Damage.STALE
    return None


def check_payload(chunks: Iterable[memoryview], digest: bytes) -> Damage | None:
    """Whether the bytes read back are those the digest was taken of."""
    return None if compute_digest(chunks) == digest else Damage.CORRUPT
