"""Names of KV blocks, shared by engines (prefix caches) and routers (the KV index).

A prompt is cut into full blocks of ``block_size`` tokens (a partial tail block has no
name: it cannot be shared). Each block has two hashes:

- ``tokens_hash``: its own tokens only, computed by Dynamo's
  ``dynamo.llm.compute_block_hash_for_seq`` (ai-dynamo-runtime 1.6.1,
  ``dynamo/_core.pyi``), which is what a router looks prompts up with in Dynamo's
  ``RadixTree``: the tree itself chains blocks by their parents;
- ``block_hash``: ``tokens_hash`` chained with the ``block_hash`` of the block before
  it, so it names the block *and its whole prefix*: equal ``block_hash`` means equal
  tokens from position 0. Engines content-address cached blocks by it, and it is the
  ``block_hash`` / ``parent_hash`` of the KV events routers apply.

Both are unsigned 64-bit integers (what Dynamo's events carry).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from dynamo.llm import compute_block_hash_for_seq

# block_hash of "no block before": the chain's starting point.
ROOT = 0


@dataclass(frozen=True, slots=True)
class BlockName:
    block_hash: int
    tokens_hash: int


def compute_tokens_hashes(tokens: Sequence[int], block_size: int) -> list[int]:
    """``tokens_hash`` of every full block of ``tokens`` (Dynamo's local block hash)."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if len(tokens) < block_size:
        return []
    return [int(h) for h in compute_block_hash_for_seq(list(tokens), block_size)]


def chain_block_hash(parent: int, tokens_hash: int) -> int:
    """The ``block_hash`` of a block whose tokens hash to ``tokens_hash`` after the
    block named ``parent`` (``ROOT`` for the first block)."""
    digest = hashlib.blake2b(
        parent.to_bytes(8, "little") + tokens_hash.to_bytes(8, "little"), digest_size=8
    ).digest()
    return int.from_bytes(digest, "little")


def chain_block_hashes(tokens_hashes: Sequence[int], parent: int = ROOT) -> list[int]:
    """The ``block_hash`` of each of consecutive blocks, given their ``tokens_hash``es,
    which follow the block ``parent``."""
    chained = []
    for tokens_hash in tokens_hashes:
        parent = chain_block_hash(parent, tokens_hash)
        chained.append(parent)
    return chained


def compute_block_names(
    tokens: Sequence[int], block_size: int, parent: int = ROOT
) -> list[BlockName]:
    """Both hashes of every full block of ``tokens``, which follow the block ``parent``."""
    tokens_hashes = compute_tokens_hashes(tokens, block_size)
    block_hashes = chain_block_hashes(tokens_hashes, parent)
    return [BlockName(b, t) for b, t in zip(block_hashes, tokens_hashes, strict=True)]
