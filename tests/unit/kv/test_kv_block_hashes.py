"""Block names: Dynamo's tokens hash per full block, chained into prefix names."""

from __future__ import annotations

import pytest
from dynamo.llm import compute_block_hash_for_seq

from tandem.kv.block_hashes import (
    ROOT,
    chain_block_hash,
    compute_block_names,
    compute_tokens_hashes,
)


@pytest.mark.parametrize("length", [0, 1, 15, 16, 17, 31, 32, 100])
def test_only_full_blocks_are_named(length: int) -> None:
    tokens = list(range(length))
    assert len(compute_tokens_hashes(tokens, 16)) == length // 16
    assert len(compute_block_names(tokens, 16)) == length // 16


def test_tokens_hashes_are_dynamos_own() -> None:
    tokens = [(i * 7919) % 50000 for i in range(64)]
    assert compute_tokens_hashes(tokens, 16) == compute_block_hash_for_seq(tokens, 16)


def test_block_hashes_name_the_whole_prefix() -> None:
    a = [1] * 48
    b = [1] * 32 + [2] * 16
    c = [2] * 16 + [1] * 32
    na, nb, nc = (compute_block_names(t, 16) for t in (a, b, c))
    assert na[:2] == nb[:2] and na[2] != nb[2]
    # Same tokens in block 1 and 2 as ``a``, after another first block: other names,
    # although the tokens hashes agree.
    assert na[1].tokens_hash == nc[1].tokens_hash
    assert all(x.block_hash != y.block_hash for x, y in zip(na, nc, strict=True))


def test_names_continue_from_a_parent() -> None:
    tokens = list(range(64))
    whole = compute_block_names(tokens, 16)
    tail = compute_block_names(tokens[32:], 16, parent=whole[1].block_hash)
    assert tail == whole[2:]
    assert whole[0].block_hash == chain_block_hash(ROOT, whole[0].tokens_hash)
    assert all(0 <= n.block_hash < 2**64 for n in whole)


def test_block_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="block_size"):
        compute_tokens_hashes([1, 2], 0)
