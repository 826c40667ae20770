"""The cache's checkpoints, pointers and chunk plans as tests see them, packed or files.

Tests that damage, delete or read cache entries go through these handles, so they hold
whatever the layout: an entry of the packed store is read with `PackedStore.get`, damaged
by storing the damaged bytes under its name (what a reader then finds is exactly those
bytes) and deleted by dropping its index row (docs/internals.md "Packed store").
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.packed_store import PackedStore, _pack_path


@dataclass(frozen=True)
class CacheEntry:
    """One entry under a cache root: `rel` is its name relative to the root."""

    cache: Path
    rel: str
    packed: bool
    size: int = 0  # what `gc` counts: the record's bytes, or the file's size

    @property
    def name(self) -> str:
        return self.rel.rsplit("/", 1)[-1]

    @property
    def parent_name(self) -> str:
        return self.rel.rsplit("/", 2)[-2] if self.rel.count("/") else ""

    def _store(self) -> tuple[FsRoot, PackedStore]:
        root = FsRoot.open(self.cache)
        return root, PackedStore(root)

    def read_bytes(self) -> bytes:
        if not self.packed:
            return (self.cache / self.rel).read_bytes()
        root, store = self._store()
        try:
            data = store.get(self.rel)
        finally:
            store.close()
            root.close()
        if data is None:
            raise FileNotFoundError(self.rel)
        return data

    def write_bytes(self, data: bytes) -> None:
        if not self.packed:
            (self.cache / self.rel).write_bytes(data)
            return
        root, store = self._store()
        try:
            store.put(self.rel, data)
        finally:
            store.close()
            root.close()

    def unlink(self) -> None:
        if not self.packed:
            (self.cache / self.rel).unlink()
            return
        root, store = self._store()
        try:
            store.remove([self.rel])
        finally:
            store.close()
            root.close()

    def zero_in_place(self) -> None:
        """Overwrite the entry's bytes where they lie with zeros (a torn write after a power
        loss): a file's content, or the packed record in its segment."""
        if not self.packed:
            path = self.cache / self.rel
            path.write_bytes(b"\0" * path.stat().st_size)
            return
        directory, _, leaf = self.rel.rpartition("/")
        index = self.cache / "pack" / "index.sqlite"
        with contextlib.closing(sqlite3.connect(f"file:{index}?mode=ro", uri=True)) as db:
            row = db.execute(
                "SELECT s.name, e.offset, e.length, s.sealed FROM entries e JOIN dirs d"
                " ON d.id = e.dir JOIN segments s ON s.id = e.segment"
                " WHERE d.name = ? AND e.leaf = ?",
                (_pack_path(directory), _pack_path(leaf)),  # index schema 2's keys
            ).fetchone()
        if row is None:
            raise FileNotFoundError(self.rel)
        segment, offset, length, sealed = row
        if sealed:
            # A sealed segment's blocks were durable before any row named them (no power
            # loss tears them), and zeros in a block would damage its neighbours too: the
            # entry's bytes read as zeros instead, which is what a reader would find.
            self.write_bytes(b"\0" * len(self.read_bytes()))
            return
        with open(self.cache / "pack" / "segments" / segment, "r+b") as handle:
            handle.seek(offset)
            handle.write(b"\0" * length)

    def exists(self) -> bool:
        if not self.packed:
            return (self.cache / self.rel).exists()
        root, store = self._store()
        try:
            return store.get(self.rel) is not None
        finally:
            store.close()
            root.close()

    def __fspath__(self) -> str:  # for messages and sorting only
        return str(self.cache / self.rel)

    def __lt__(self, other: CacheEntry) -> bool:
        return self.rel < other.rel


def cache_entries(cache: Path | str, pattern: str = "*") -> list[CacheEntry]:
    """Entries (packed first, then files) whose name relative to `cache` matches `pattern`
    (fnmatch, `*` crossing `/`), sorted by name; `.rj-tmp-*` and the pack's own files are
    not entries."""
    cache = Path(cache)
    found: dict[str, CacheEntry] = {}
    if (cache / "pack" / "index.sqlite").exists():
        with FsRoot.open(cache) as root:
            store = PackedStore(root)
            try:
                for entry in store.entries(""):
                    if fnmatch.fnmatch(entry.name, pattern):
                        found[entry.name] = CacheEntry(cache, entry.name, True, entry.size)
            finally:
                store.close()
    if cache.is_dir():
        for directory, _dirs, files in os.walk(cache):
            for leaf in files:
                rel = os.path.relpath(os.path.join(directory, leaf), cache)
                if rel.startswith("pack/") or leaf.startswith(".rj-tmp-"):
                    continue
                if fnmatch.fnmatch(rel, pattern) and rel not in found:
                    size = os.path.getsize(os.path.join(directory, leaf))
                    found[rel] = CacheEntry(cache, rel, False, size)
    return sorted(found.values())


def checkpoints(cache: Path | str, pattern: str = "*.ckpt") -> list[CacheEntry]:
    """The checkpoint entries under `cache`."""
    return [e for e in cache_entries(cache, pattern) if e.rel.endswith(".ckpt")]


def plans(cache: Path | str) -> list[CacheEntry]:
    """The chunk-plan entries under `cache`."""
    return cache_entries(cache, "chunkplans/*.plan")


def file_count(cache: Path | str) -> int:
    """Regular files under `cache` (what an inode count would see)."""
    return sum(len(files) for _d, _s, files in os.walk(cache))
