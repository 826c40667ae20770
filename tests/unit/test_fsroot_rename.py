"""`FsRoot.rename` (used by gc's tombstones) and `remove_tree` with entries vanishing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from runjournal.adapters.fsroot import AlreadyExists, FsNotFound, FsRoot, PathRefused


def test_rename_within_a_directory_never_replaces(tmp_path: Path) -> None:
    (tmp_path / "a" / "x").mkdir(parents=True)
    (tmp_path / "a" / "x" / "f").write_bytes(b"1")
    (tmp_path / "a" / "y").mkdir()
    with FsRoot.open(tmp_path) as root:
        root.rename("a/x", ".rj-gc-x")
        assert (tmp_path / "a" / ".rj-gc-x" / "f").read_bytes() == b"1"
        with pytest.raises(AlreadyExists):
            root.rename("a/.rj-gc-x", "y")
        with pytest.raises(FsNotFound):
            root.rename("a/missing", "z")
        with pytest.raises(PathRefused):
            root.rename("a/y", "../out")
        with pytest.raises(PathRefused):
            root.rename("a/y", "b/c")
    assert (tmp_path / "a" / "y").is_dir()


def test_rename_does_not_follow_a_symlinked_parent(tmp_path: Path) -> None:
    (tmp_path / "real" / "x").mkdir(parents=True)
    os.symlink(tmp_path / "real", tmp_path / "link")
    with FsRoot.open(tmp_path) as root, pytest.raises(Exception) as info:
        root.rename("link/x", "y")
    assert "symlink" in str(info.value).lower() or "refused" in str(info.value).lower()
    assert (tmp_path / "real" / "x").is_dir()


def test_remove_tree_missing_ok_tolerates_a_tree_that_is_already_gone(tmp_path: Path) -> None:
    with FsRoot.open(tmp_path) as root:
        root.remove_tree("nothing", missing_ok=True)
        with pytest.raises(FsNotFound):
            root.remove_tree("nothing")
