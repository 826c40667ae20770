"""Compaction racing writers of other processes (docs/internals.md "Packed store"): three
processes rewrite their own entries, a shared one and large objects through small,
fast-rotating segments while this process compacts without pause. Every writer reads back
what it wrote at every step, and at the end every entry holds its last version."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.packed_store import PackedStore

pytestmark = pytest.mark.stress

WRITER = """
import hashlib, sys
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.packed_store import PackedStore

def data(name, version, size):
    seed = hashlib.sha256(f"{name}/{version}".encode()).digest()
    return (seed * (size // 32 + 1))[:size]

tag, versions = sys.argv[2], int(sys.argv[3])
with FsRoot.open(sys.argv[1]) as handle:
    store = PackedStore(handle, segment_limit=8 << 10, large=2000)
    for version in range(versions):
        for i in range(30):
            name = f"ws/{tag}/{i}.ckpt"
            size = 3000 if i == 0 else 200 + i * 7  # entry 0 is a large object
            store.put(name, data(name, version, size))
            if store.get(name) != data(name, version, size):
                print("mismatch", name, version, flush=True)
                sys.exit(1)
        store.put("ws/shared.ckpt", data(tag, version, 100))
    store.close()
"""


def _data(name: str, version: int, size: int) -> bytes:
    seed = hashlib.sha256(f"{name}/{version}".encode()).digest()
    return (seed * (size // 32 + 1))[:size]


@pytest.mark.parametrize("round_", range(4))
def test_compaction_racing_three_writing_processes(tmp_path: Path, round_: int) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    versions = 25
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(cache), f"w{n}", str(versions)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(3)
    ]
    with FsRoot.open(cache) as root:
        compactor = PackedStore(root, segment_limit=8 << 10)
        try:
            while any(w.poll() is None for w in writers):
                if compactor.exists:
                    compactor.compact(keep_ratio=0.95)
            for writer in writers:
                out, _ = writer.communicate()
                assert writer.returncode == 0, out
            compactor.compact()
            for n in range(3):
                for i in range(30):
                    name = f"ws/w{n}/{i}.ckpt"
                    size = 3000 if i == 0 else 200 + i * 7
                    assert compactor.get(name) == _data(name, versions - 1, size), name
            assert compactor.get("ws/shared.ckpt") in {
                _data(f"w{n}", versions - 1, 100) for n in range(3)
            }
        finally:
            compactor.close()
