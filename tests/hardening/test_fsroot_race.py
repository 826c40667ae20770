"""FsRoot under a racing attacker: a thread keeps swapping a directory (or the final file)
for a symlink pointing outside the root while writes, reads and appends go on.

The swap is one atomic renameat2(RENAME_EXCHANGE), so the name always exists and is a
real directory half of the time and a symlink to the outside the other half. Nothing may
land outside, and nothing from outside may be read back.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from runjournal.adapters import fsroot
from runjournal.adapters.fsroot import (
    FsNotFound,
    FsRoot,
    NotADirectory,
    NotRegularFile,
    SymlinkRefused,
)

SECRET = b"outside secret\n"
RUN_SECONDS = 0.4
AT_FDCWD = -100
RENAME_EXCHANGE = 2
_libc = ctypes.CDLL(None, use_errno=True)
_renameat2 = getattr(_libc, "renameat2", None)

# What a refused operation may report, depending on the moment the swap happened.
REFUSED = (SymlinkRefused, NotADirectory, NotRegularFile, FsNotFound)


def exchange(a: Path, b: Path) -> None:
    assert _renameat2 is not None
    result = _renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE)
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(a))


@pytest.fixture(params=["openat2", "walk"])
def resolution(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "walk":
        monkeypatch.setattr(fsroot, "_openat2_enabled", False)
    elif not fsroot._openat2_enabled:
        pytest.skip("openat2 is not available here")
    return str(request.param)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    if _renameat2 is None:
        pytest.skip("renameat2 is not available in this libc")
    path = tmp_path / "outside"
    (path / "sub").mkdir(parents=True)
    (path / "secret.txt").write_bytes(SECRET)
    (path / "inner").write_bytes(SECRET)
    return path


def outside_state(path: Path) -> dict[str, str]:
    state = {}
    for directory, dirs, files in os.walk(path):
        for name in dirs + files:
            full = Path(directory, name)
            relative = str(full.relative_to(path))
            if full.is_symlink() or full.is_dir():
                state[relative] = "dir-or-link"
            else:
                state[relative] = hashlib.sha256(full.read_bytes()).hexdigest()
    return state


@contextlib.contextmanager
def swapping(a: Path, b: Path) -> Iterator[None]:
    """A thread exchanging `a` and `b` as fast as it can while the block runs."""
    stop = threading.Event()
    swaps = 0

    def run() -> None:
        nonlocal swaps
        while not stop.is_set():
            exchange(a, b)
            swaps += 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
    assert not thread.is_alive()
    assert swaps > 100, "the attacker barely ran"


def hammer(operation: Callable[[int], object]) -> tuple[int, int]:
    """Run `operation` until RUN_SECONDS pass; count successes and typed refusals."""
    done = refused = 0
    deadline = time.monotonic() + RUN_SECONDS
    i = 0
    while time.monotonic() < deadline:
        i += 1
        try:
            operation(i)
        except REFUSED:
            refused += 1
        else:
            done += 1
    return done, refused


def test_directory_swapped_for_outside_link(tmp_path: Path, outside: Path, resolution: str) -> None:
    root_path = tmp_path / "root"
    (root_path / "d" / "sub").mkdir(parents=True)
    (root_path / "d" / "inner").write_bytes(b"inside\n")
    (root_path / "swap").symlink_to(outside)
    before = outside_state(outside)
    with FsRoot.open(root_path) as root:

        def operate(i: int) -> None:
            if i % 3 == 0:
                assert root.read_bytes("d/inner") != SECRET
            elif i % 3 == 1:
                root.write_bytes(f"d/f{i % 7}", b"data")
            else:
                root.write_bytes(f"d/sub/g{i % 5}/h", b"data", overwrite=True)

        with swapping(root_path / "d", root_path / "swap"):
            done, refused = hammer(operate)
    assert outside_state(outside) == before, "a write escaped the root"
    assert done > 0 and refused > 0, (done, refused)


def test_intermediate_directory_swapped_with_relative_escape(
    tmp_path: Path, outside: Path, resolution: str
) -> None:
    root_path = tmp_path / "root"
    (root_path / "a" / "b" / "c").mkdir(parents=True)
    (root_path / "a" / "swap").symlink_to("../../outside")
    before = outside_state(outside)
    with FsRoot.open(root_path) as root:

        def operate(i: int) -> None:
            if i % 3 == 0:
                root.mkdir(f"a/b/m{i % 5}")
            elif i % 3 == 1:
                root.write_bytes(f"a/b/c/n{i % 4}/f", b"x")
            else:
                root.write_bytes(f"a/b/c/unique-{i}", b"x", overwrite=False)

        with swapping(root_path / "a" / "b", root_path / "a" / "swap"):
            done, refused = hammer(operate)
    assert outside_state(outside) == before
    assert done > 0 and refused > 0, (done, refused)


def test_final_file_swapped_for_outside_link(
    tmp_path: Path, outside: Path, resolution: str
) -> None:
    root_path = tmp_path / "root"
    (root_path / "d").mkdir(parents=True)
    (root_path / "d" / "log").write_bytes(b"")
    (root_path / "d" / "swap").symlink_to(outside / "secret.txt")
    before = outside_state(outside)
    with FsRoot.open(root_path) as root:

        def operate(i: int) -> None:
            if i % 2:
                root.append_line("d/log", b"line")
            else:
                assert root.read_bytes("d/log") != SECRET

        with swapping(root_path / "d" / "log", root_path / "d" / "swap"):
            done, refused = hammer(operate)
    assert outside_state(outside) == before
    assert (outside / "secret.txt").read_bytes() == SECRET
    assert done > 0 and refused > 0, (done, refused)
