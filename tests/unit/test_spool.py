"""The run's spool (adapters/spool.py) and its inputs by path (adapters/sources.py
`SourceFiles`): what lets a run hold names and digests instead of bytes (issue 29)."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runjournal.adapters.fsroot import FsRoot
from runjournal.adapters.sources import SourceFiles, read_text_file
from runjournal.adapters.spool import FileSpool
from runjournal.domain.ports import SourceChanged


@settings(max_examples=30, deadline=None)
@given(st.lists(st.binary(max_size=3000), max_size=20))
def test_what_is_put_is_got_back_by_its_handle(tmp_path_factory, blobs: list[bytes]) -> None:
    root = FsRoot.open(tmp_path_factory.mktemp("spool"))
    spool = FileSpool.open(root)
    try:
        handles = [spool.put(b) for b in blobs]
        for blob, handle in reversed(list(zip(blobs, handles, strict=True))):
            assert spool.get(handle) == blob
    finally:
        spool.close()
        root.close()


def test_the_spool_leaves_no_name_in_the_output_root(tmp_path: Path) -> None:
    root = FsRoot.open(tmp_path)
    spool = FileSpool.open(root)
    try:
        handle = spool.put(b"x" * 100_000)
        assert os.listdir(tmp_path) == []
        assert spool.get(handle) == b"x" * 100_000
    finally:
        spool.close()
        root.close()
    assert os.listdir(tmp_path) == []


def test_puts_from_threads_never_overlap(tmp_path: Path) -> None:
    root = FsRoot.open(tmp_path)
    spool = FileSpool.open(root)
    got: dict[bytes, tuple[int, int]] = {}
    lock = threading.Lock()

    def put(i: int) -> None:
        for j in range(50):
            blob = f"{i}:{j}:".encode() * (j + 1)
            handle = spool.put(blob)
            with lock:
                got[blob] = handle

    threads = [threading.Thread(target=put, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert all(spool.get(handle) == blob for blob, handle in got.items())
    finally:
        spool.close()
        root.close()


def test_an_input_is_kept_without_its_bytes_and_read_again_by_path(tmp_path: Path) -> None:
    path = tmp_path / "a.md"
    path.write_text("one\n\ntwo\n")
    files = SourceFiles()
    source = read_text_file(str(path), base_dir=str(tmp_path), key="inputs", files=files)
    assert source.data == b"" and source.size == len(b"one\n\ntwo\n")
    assert source.sha256 == hashlib.sha256(b"one\n\ntwo\n").hexdigest()
    assert files.read(source) == b"one\n\ntwo\n"
    assert files.chunks(source.name, "any") is None


def test_an_input_changed_during_the_run_is_source_changed(tmp_path: Path) -> None:
    path = tmp_path / "a.md"
    path.write_text("one\n")
    files = SourceFiles()
    source = read_text_file(str(path), base_dir=str(tmp_path), key="inputs", files=files)
    path.write_text("one, edited\n")
    with pytest.raises(SourceChanged, match="changed while the run was going"):
        files.read(source)
    path.unlink()
    with pytest.raises(SourceChanged, match="cannot be read"):
        files.read(source)
