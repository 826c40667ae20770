"""FsRoot.replace_symlink: the one symbolic link runjournal makes (`<output root>/latest`).

Atomic (a reader never sees no link while it is replaced), confined (the target is a
sibling name), and never clobbering a real file or directory.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from runjournal.adapters import fsroot
from runjournal.adapters.fsroot import TEMP_PREFIX, AlreadyExists, FsRoot, PathRefused


@pytest.fixture
def root(tmp_path: Path):
    (tmp_path / "r").mkdir()
    with FsRoot.open(tmp_path / "r") as opened:
        yield opened, tmp_path / "r"


def test_creates_then_replaces_a_relative_link(root) -> None:
    fs, path = root
    (path / "run-a").mkdir()
    (path / "run-b").mkdir()
    fs.replace_symlink("latest", "run-a")
    assert os.readlink(path / "latest") == "run-a"
    fs.replace_symlink("latest", "run-b")
    assert os.readlink(path / "latest") == "run-b"
    assert (path / "latest").resolve() == (path / "run-b").resolve()
    assert not [p for p in os.listdir(path) if p.startswith(TEMP_PREFIX)]


def test_a_dangling_target_is_allowed(root) -> None:
    fs, path = root
    fs.replace_symlink("latest", "not-yet")
    assert os.readlink(path / "latest") == "not-yet"


def test_in_a_subdirectory(root) -> None:
    fs, path = root
    fs.replace_symlink("a/b/latest", "x")
    assert os.readlink(path / "a" / "b" / "latest") == "x"
    assert oct((path / "a").stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("target", ["../outside", "/etc", "a/b", "..", ".", "", "x\x00y"])
def test_targets_outside_the_directory_are_refused(root, target) -> None:
    fs, path = root
    with pytest.raises(PathRefused):
        fs.replace_symlink("latest", target)
    assert not (path / "latest").is_symlink()


def test_the_temp_prefix_is_refused_as_target(root) -> None:
    fs, _path = root
    with pytest.raises(PathRefused):
        fs.replace_symlink("latest", TEMP_PREFIX + "x")


@pytest.mark.parametrize("kind", ["file", "dir"])
def test_a_real_entry_is_never_replaced(root, kind) -> None:
    fs, path = root
    if kind == "file":
        (path / "latest").write_text("mine")
    else:
        (path / "latest").mkdir()
    with pytest.raises(AlreadyExists, match="not a symbolic link"):
        fs.replace_symlink("latest", "run")
    assert not (path / "latest").is_symlink()
    if kind == "file":
        assert (path / "latest").read_text() == "mine"


def test_a_symlinked_parent_is_refused(root, tmp_path: Path) -> None:
    fs, path = root
    (tmp_path / "outside").mkdir()
    (path / "sub").symlink_to(tmp_path / "outside")
    with pytest.raises(fsroot.FsError):
        fs.replace_symlink("sub/latest", "x")
    assert list((tmp_path / "outside").iterdir()) == []


def test_a_failed_rename_leaves_no_temp_link(root, monkeypatch) -> None:
    fs, path = root
    fs.replace_symlink("latest", "old")

    def refuse(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fsroot.os, "replace", refuse)
    with pytest.raises(fsroot.NoSpace):
        fs.replace_symlink("latest", "new")
    assert os.readlink(path / "latest") == "old"
    assert not [p for p in os.listdir(path) if p.startswith(TEMP_PREFIX)]


def test_readers_always_see_a_link_while_it_is_replaced(root) -> None:
    fs, path = root
    fs.replace_symlink("latest", "run-0")
    seen: list[str] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                seen.append(os.readlink(path / "latest"))
            except OSError as exc:  # the link was absent (or not a link) for a moment
                seen.append(f"error: {exc}")

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(1, 50):
            fs.replace_symlink("latest", f"run-{i}")
    finally:
        stop.set()
        reader.join()
    assert seen and all(s.startswith("run-") for s in seen)
    assert os.readlink(path / "latest") == "run-49"
