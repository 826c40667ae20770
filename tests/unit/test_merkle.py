"""The Merkle tree against the RFC 6962 definition, and its proofs both ways."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from runjournal.domain.merkle import (
    EMPTY_ROOT,
    Frontier,
    PackedLeaves,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root_of,
    verify_consistency,
    verify_inclusion,
)


def mth(data: list[bytes]) -> bytes:
    """RFC 6962 section 2.1, written as the RFC states it (leaf data, not hashes)."""
    n = len(data)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashlib.sha256(b"\x00" + data[0]).digest()
    k = 1
    while k * 2 < n:
        k *= 2
    return hashlib.sha256(b"\x01" + mth(data[:k]) + mth(data[k:])).digest()


leaves_data = st.lists(st.binary(max_size=8), min_size=1, max_size=40, unique=True)


@given(leaves_data)
def test_the_root_and_the_frontier_are_the_rfc_definition(data: list[bytes]) -> None:
    leaves = [leaf_hash(d) for d in data]
    frontier = Frontier()
    for i, leaf in enumerate(leaves):
        frontier.append(leaf)
        assert frontier.size == i + 1
        assert frontier.root() == mth(data[: i + 1])
    assert root_of(leaves) == mth(data)


def test_the_empty_tree_and_prefixes_differ() -> None:
    assert root_of([]) == EMPTY_ROOT == Frontier().root()
    # a leaf can never pass for a node: two leaves' node differs from a leaf of their hashes
    a, b = leaf_hash(b"a"), leaf_hash(b"b")
    assert root_of([a, b]) != leaf_hash(a + b)


@given(leaves_data, st.data())
def test_every_inclusion_proof_verifies_and_no_other_leaf_does(
    data: list[bytes], draw: st.DataObject
) -> None:
    leaves = [leaf_hash(d) for d in data]
    root, n = root_of(leaves), len(leaves)
    index = draw.draw(st.integers(0, n - 1))
    proof = inclusion_proof(index, leaves)
    assert verify_inclusion(index, n, leaves[index], proof, root)
    assert not verify_inclusion(index, n, leaf_hash(b"forged"), proof, root)
    if n > 1:
        other = (index + 1) % n
        assert not verify_inclusion(other, n, leaves[index], proof, root)
    if proof:
        broken = [*proof[:-1], hashlib.sha256(proof[-1]).digest()]
        assert not verify_inclusion(index, n, leaves[index], broken, root)


@given(leaves_data, st.data())
def test_every_consistency_proof_verifies_and_a_rewritten_prefix_fails(
    data: list[bytes], draw: st.DataObject
) -> None:
    leaves = [leaf_hash(d) for d in data]
    n = len(leaves)
    m = draw.draw(st.integers(1, n))
    old_root, new_root = root_of(leaves[:m]), root_of(leaves)
    proof = consistency_proof(m, leaves)
    assert verify_consistency(m, n, old_root, new_root, proof)
    # the same history with one of its first m leaves rewritten cannot prove it
    at = draw.draw(st.integers(0, m - 1))
    rewritten = [*leaves[:at], leaf_hash(b"rewritten" + data[at]), *leaves[at + 1 :]]
    assert not verify_consistency(
        m, n, old_root, root_of(rewritten), consistency_proof(m, rewritten)
    )
    assert not verify_consistency(m, n, root_of(rewritten[:m]), new_root, proof)


@given(leaves_data, st.data())
def test_packed_leaves_give_the_same_roots_and_proofs_as_a_list(leaves, data) -> None:
    hashes = [leaf_hash(x) for x in leaves]
    packed = PackedLeaves()
    for h in hashes:
        packed.append(h)
    assert len(packed) == len(hashes) and list(packed) == hashes
    assert root_of(packed) == root_of(hashes)
    old = data.draw(st.integers(1, len(hashes)))
    assert consistency_proof(old, packed) == consistency_proof(old, hashes)
    start = data.draw(st.integers(0, len(hashes)))
    stop = data.draw(st.integers(start, len(hashes)))
    assert list(packed[start:stop]) == hashes[start:stop]
    assert packed[-1] == hashes[-1]
    assert packed.digest() == hashlib.sha256(b"".join(hashes)).digest()


def test_a_slice_of_packed_leaves_is_read_only() -> None:
    packed = PackedLeaves()
    packed.append(leaf_hash(b"a"))
    with pytest.raises(TypeError):
        packed[0:1].append(leaf_hash(b"b"))
    with pytest.raises(ValueError):
        packed.append(b"short")
