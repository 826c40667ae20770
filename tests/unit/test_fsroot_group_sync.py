"""`FsRoot` for group durability and links: `write_bytes(durable=False)`, `sync`, `link`,
`link_count` (docs/internals.md "Group durability", "Run outputs as links")."""

from __future__ import annotations

import os
import stat

import pytest
from runjournal.adapters import fsroot
from runjournal.adapters.fsroot import (
    AlreadyExists,
    FsNotFound,
    FsRoot,
    NotRegularFile,
    SymlinkRefused,
)


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(fsroot.os, "fsync", counting)
    return calls


def test_a_non_durable_write_fsyncs_nothing_and_is_still_atomic(tmp_path, fsyncs) -> None:
    with FsRoot.open(tmp_path) as root:
        root.write_bytes("a/b/c.bin", b"new", durable=False)
        assert fsyncs == []  # not the file, not the directory, not the created parents
        root.write_bytes("a/b/c.bin", b"newer", durable=False)
        assert fsyncs == []
        root.write_bytes("a/b/d.bin", b"x")
        assert len(fsyncs) == 2  # the durable default: the file and its directory
    assert (tmp_path / "a/b/c.bin").read_bytes() == b"newer"
    assert not [p for p in (tmp_path / "a/b").iterdir() if p.name.startswith(".rj-tmp-")]
    assert stat.S_IMODE((tmp_path / "a/b/c.bin").stat().st_mode) == 0o600


def test_mode_is_applied_whatever_the_umask(tmp_path) -> None:
    old = os.umask(0o777)
    try:
        with FsRoot.open(tmp_path) as root:
            root.write_bytes("ro", b"1", mode=0o400, durable=False)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "ro").stat().st_mode) == 0o400


def test_sync_is_one_syncfs_on_the_roots_descriptor(tmp_path, monkeypatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(fsroot, "_syncfs", lambda fd: calls.append(fd) or 0)
    with FsRoot.open(tmp_path) as root:
        root.sync()
        assert calls == [root._fd]


def test_a_failed_sync_is_a_typed_error(tmp_path, monkeypatch) -> None:
    import ctypes

    def failing(fd: int) -> int:
        ctypes.set_errno(5)  # EIO: a writeback error syncfs reports
        return -1

    monkeypatch.setattr(fsroot, "_syncfs", failing)
    with FsRoot.open(tmp_path) as root, pytest.raises(fsroot.FsIOError):
        root.sync()


def test_the_real_sync_runs(tmp_path) -> None:
    with FsRoot.open(tmp_path) as root:
        root.write_bytes("f", b"1", durable=False)
        root.sync()  # the real syncfs (or sync) returns without error


def test_link_shares_the_inode_and_never_replaces(tmp_path) -> None:
    (tmp_path / "objects").mkdir()
    (tmp_path / "run").mkdir()
    with FsRoot.open(tmp_path / "objects") as objects, FsRoot.open(tmp_path / "run") as run:
        objects.write_bytes("ab/obj", b"content", mode=0o400)
        run.link("artifacts/x.json", objects, "ab/obj")
        assert objects.link_count("ab/obj") == 2
        assert (tmp_path / "run/artifacts/x.json").read_bytes() == b"content"
        with pytest.raises(AlreadyExists):
            run.link("artifacts/x.json", objects, "ab/obj")
        with pytest.raises(FsNotFound):
            run.link("artifacts/y.json", objects, "ab/missing")
        run.remove("artifacts/x.json")
        assert objects.link_count("ab/obj") == 1


def test_link_refuses_a_symlink_or_non_regular_source(tmp_path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "outside").write_bytes(b"secret")
    os.symlink(tmp_path / "outside", tmp_path / "src" / "link")
    os.mkfifo(tmp_path / "src" / "fifo")
    (tmp_path / "dst").mkdir()
    with FsRoot.open(tmp_path / "src") as src, FsRoot.open(tmp_path / "dst") as dst:
        with pytest.raises(SymlinkRefused):
            dst.link("a", src, "link")
        with pytest.raises(NotRegularFile):
            dst.link("b", src, "fifo")
    assert list((tmp_path / "dst").iterdir()) == []
