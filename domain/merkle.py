"""An RFC 6962 / RFC 9162 Merkle tree over a run's rows (docs/internals.md "Merkle tree
and signed checkpoints").

The hash chain shows an edit that did not recompute it; the tree adds what a chain
cannot: a short proof that a published checkpoint (tree size + root) is a prefix of the
journal's history now (a consistency proof), and that one row is in it (an inclusion
proof), each O(log n) hashes. Leaves and interior nodes get distinct prefixes (0x00,
0x01) so a leaf can never pass for a node.

Pure functions over leaf hashes; `Frontier` folds a growing log in O(log n) memory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Final, overload

__all__ = [
    "EMPTY_ROOT",
    "Frontier",
    "PackedLeaves",
    "consistency_proof",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "root_of",
    "verify_consistency",
    "verify_inclusion",
]

LEAF_PREFIX: Final = b"\x00"
NODE_PREFIX: Final = b"\x01"
EMPTY_ROOT: Final = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(LEAF_PREFIX + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n > 1): RFC 9162 section 2.1.1."""
    k = 1
    while k << 1 < n:
        k <<= 1
    return k


def root_of(leaves: Sequence[bytes]) -> bytes:
    """MTH(D[n]) over leaf hashes (already `leaf_hash`ed)."""
    if not leaves:
        return EMPTY_ROOT
    frontier = Frontier()
    for leaf in leaves:
        frontier.append(leaf)
    return frontier.root()


def inclusion_proof(index: int, leaves: Sequence[bytes]) -> list[bytes]:
    """PATH(m, D[n]): the audit path of leaf `index` in the tree of `leaves`."""
    if not 0 <= index < len(leaves):
        raise ValueError(f"leaf {index} is not in a tree of {len(leaves)}")
    if len(leaves) == 1:
        return []
    k = _split(len(leaves))
    if index < k:
        return [*inclusion_proof(index, leaves[:k]), root_of(leaves[k:])]
    return [*inclusion_proof(index - k, leaves[k:]), root_of(leaves[:k])]


def consistency_proof(old_size: int, leaves: Sequence[bytes]) -> list[bytes]:
    """PROOF(m, D[n]): that the tree of the first `old_size` leaves is a prefix."""
    if not 0 < old_size <= len(leaves):
        raise ValueError(f"no consistency proof from {old_size} to {len(leaves)}")
    return _subproof(old_size, leaves, True)


def _subproof(m: int, leaves: Sequence[bytes], complete: bool) -> list[bytes]:
    n = len(leaves)
    if m == n:
        return [] if complete else [root_of(leaves)]
    k = _split(n)
    if m <= k:
        return [*_subproof(m, leaves[:k], complete), root_of(leaves[k:])]
    return [*_subproof(m - k, leaves[k:], False), root_of(leaves[:k])]


def verify_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> bool:
    """RFC 9162 section 2.1.3.2."""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == root


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """RFC 9162 section 2.1.4.2."""
    if not 0 < old_size <= new_size:
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # a power of two: the old root starts the path
        path.insert(0, old_root)
    if not path:
        return False
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and fr == old_root and sr == new_root


class Frontier:
    """The roots of the perfect subtrees of a growing log: appends and the root in
    O(log n) memory, so the writer seals a run without reading it back."""

    __slots__ = ("_size", "_stack")

    def __init__(self) -> None:
        self._stack: list[bytes] = []  # one root per set bit of size, largest first
        self._size = 0

    @property
    def size(self) -> int:
        return self._size

    def append(self, leaf: bytes) -> None:
        node, size = leaf, self._size
        while size & 1:
            node = node_hash(self._stack.pop(), node)
            size >>= 1
        self._stack.append(node)
        self._size += 1

    def root(self) -> bytes:
        if not self._stack:
            return EMPTY_ROOT
        node = self._stack[-1]
        for left in reversed(self._stack[:-1]):
            node = node_hash(left, node)
        return node


HASH_SIZE: Final = 32


class PackedLeaves(Sequence[bytes]):
    """Leaf hashes packed 32 bytes each in one buffer: a run's leaves cost 32 bytes an
    event (not a bytes object each), and a slice is a view, so the recursive proofs
    over a long run copy nothing (docs/performance.md "Reading commands on a large run")."""

    __slots__ = ("_data", "_start", "_stop")

    def __init__(self) -> None:
        self._data = bytearray()
        self._start = 0
        self._stop: int | None = None  # None: to the end of the buffer (the growing log)

    @classmethod
    def _view(cls, data: bytearray, start: int, stop: int) -> PackedLeaves:
        view = cls.__new__(cls)
        view._data, view._start, view._stop = data, start, stop
        return view

    def append(self, leaf: bytes) -> None:
        if self._start or self._stop is not None:
            raise TypeError("a slice of the leaves is read-only")
        if len(leaf) != HASH_SIZE:
            raise ValueError(f"a leaf hash is {HASH_SIZE} bytes, not {len(leaf)}")
        self._data += leaf

    def digest(self) -> bytes:
        """SHA-256 of the packed leaves: two passes over a run compare in 32 bytes."""
        end = len(self._data) // HASH_SIZE if self._stop is None else self._stop
        return hashlib.sha256(self._data[self._start * HASH_SIZE : end * HASH_SIZE]).digest()

    def __len__(self) -> int:
        end = len(self._data) // HASH_SIZE if self._stop is None else self._stop
        return end - self._start

    @overload
    def __getitem__(self, index: int) -> bytes: ...
    @overload
    def __getitem__(self, index: slice) -> PackedLeaves: ...
    def __getitem__(self, index: int | slice) -> bytes | PackedLeaves:
        size = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(size)
            if step != 1:
                raise ValueError("leaves are sliced contiguously")
            stop = max(start, stop)
            return PackedLeaves._view(self._data, self._start + start, self._start + stop)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError(index)
        at = (self._start + index) * HASH_SIZE
        return bytes(self._data[at : at + HASH_SIZE])

    def __iter__(self) -> Iterator[bytes]:
        for at in range(self._start, self._start + len(self)):
            yield bytes(self._data[at * HASH_SIZE : (at + 1) * HASH_SIZE])
