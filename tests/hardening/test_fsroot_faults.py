"""FsRoot under injected I/O faults (docs/internals.md "Confined, atomic file access").

Each os function a write goes through is made to fail on its N-th call, for every N a
clean run makes, with ENOSPC, EIO, EROFS and EACCES (CI runs as root, so permission
failures are injected, never produced by chmod). Every time: the right typed error, no
temp file, and the final name holds the old content or nothing, never the new data.
A real small tmpfs gives a genuine ENOSPC and EROFS where mounting is permitted.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from runjournal.adapters import fsroot
from runjournal.adapters.fsroot import (
    TEMP_PREFIX,
    FsError,
    FsIOError,
    FsRoot,
    NoSpace,
    PermissionDeniedError,
    ReadOnlyFs,
)

NEW = b"new content\n"
OLD = b"old content\n"
FAULTED = ("open", "mkdir", "fchmod", "write", "fsync", "replace", "link", "unlink")
EXPECTED: dict[int, type[FsError]] = {
    errno.ENOSPC: NoSpace,
    errno.EIO: FsIOError,
    errno.EROFS: ReadOnlyFs,
    errno.EACCES: PermissionDeniedError,
}


class Injector:
    """Wraps os.<name> functions: counts calls, and fails the `fail_at`-th call of one."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: Counter[str] = Counter()
        self.target: str | None = None
        self.fail_at = 0
        self.code = 0
        for name in FAULTED:
            monkeypatch.setattr(os, name, self._wrap(name, getattr(os, name)))

    def _wrap(self, name: str, real: Callable[..., object]) -> Callable[..., object]:
        def wrapper(*args: object, **kwargs: object) -> object:
            self.calls[name] += 1
            if name == self.target and self.calls[name] == self.fail_at:
                raise OSError(self.code, os.strerror(self.code))
            return real(*args, **kwargs)

        return wrapper

    def arm(self, target: str | None, fail_at: int = 0, code: int = 0) -> None:
        self.calls.clear()
        self.target, self.fail_at, self.code = target, fail_at, code


@pytest.fixture(params=["openat2", "walk"])
def resolution(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "walk":
        monkeypatch.setattr(fsroot, "_openat2_enabled", False)
    elif not fsroot._openat2_enabled:
        pytest.skip("openat2 is not available here")
    return str(request.param)


def leftovers(path: Path) -> list[str]:
    return [
        name
        for _, dirs, files in os.walk(path)
        for name in dirs + files
        if name.startswith(TEMP_PREFIX)
    ]


# scenario: (prepare the root, the write, the content the name may hold after a failure)
Scenario = tuple[Callable[[Path], None], Callable[[FsRoot], None], tuple[bytes | None, ...]]


def _nothing(path: Path) -> None:
    return None


def _old_file(path: Path) -> None:
    (path / "a" / "b").mkdir(parents=True)
    (path / "a" / "b" / "out.json").write_bytes(OLD)


SCENARIOS: dict[str, Scenario] = {
    "new-nested": (_nothing, lambda r: r.write_bytes("a/b/out.json", NEW), (None,)),
    "new-no-clobber": (
        _nothing,
        lambda r: r.write_bytes("a/b/out.json", NEW, overwrite=False),
        (None,),
    ),
    # after the rename only the directory fsync can fail; the file is then unlinked
    "overwrite": (_old_file, lambda r: r.write_bytes("a/b/out.json", NEW), (OLD, None)),
    "top-level": (_nothing, lambda r: r.write_bytes("out.json", NEW), (None,)),
}


def content(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_fault_is_typed_and_leaves_no_trace(
    scenario: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resolution: str
) -> None:
    prepare, write, allowed = SCENARIOS[scenario]
    final_name = "out.json" if scenario == "top-level" else "a/b/out.json"
    injector = Injector(monkeypatch)

    def fresh(index: int) -> Path:
        path = tmp_path / f"case{index}"
        path.mkdir()
        prepare(path)
        return path

    clean = fresh(0)
    with FsRoot.open(clean) as root:
        injector.arm(None)
        write(root)
        counts = dict(injector.calls)
    assert (clean / final_name).read_bytes() == NEW
    assert counts["open"] >= 1 and counts["write"] >= 1 and counts["fsync"] >= 2
    assert counts.get("replace" if "clobber" not in scenario else "link", 0) == 1

    index = 0
    for target in FAULTED:
        for fail_at in range(1, counts.get(target, 0) + 1):
            for code, expected in EXPECTED.items():
                index += 1
                path = fresh(index)
                with FsRoot.open(path) as root:
                    injector.arm(target, fail_at, code)
                    with pytest.raises(expected) as info:
                        write(root)
                    injector.arm(None)
                where = f"{target}#{fail_at} {errno.errorcode[code]}"
                assert info.value.errno == code, where
                assert info.value.name == final_name, where
                assert "\n" not in str(info.value)
                assert leftovers(path) == [], where
                assert content(path / final_name) in allowed, where
    assert index == len(EXPECTED) * sum(counts.get(target, 0) for target in FAULTED)


def test_short_writes_are_completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data[:3])))
    data = bytes(range(256)) * 40
    with FsRoot.open(tmp_path) as root:
        root.write_bytes("x/short.bin", data)
        root.append_line("x/log", b"a longer line than three bytes")
        assert root.read_bytes("x/short.bin") == data
        assert root.read_bytes("x/log") == b"a longer line than three bytes\n"


def test_write_making_no_progress_is_an_io_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "write", lambda fd, data: 0)
    with FsRoot.open(tmp_path) as root, pytest.raises(FsIOError):
        root.write_bytes("stuck", b"data")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("target", ["open", "write", "fsync", "fchmod"])
def test_append_faults_are_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    (tmp_path / "log").write_bytes(b"old\n")
    injector = Injector(monkeypatch)
    with FsRoot.open(tmp_path) as root:
        for code, expected in EXPECTED.items():
            injector.arm(target, 1, code)
            if target == "fchmod":  # only a new log file is fchmod-ed
                with pytest.raises(expected):
                    root.append_line(f"new-{code}.log", b"x")
                continue
            with pytest.raises(expected):
                root.append_line("log", b"x")
    assert (tmp_path / "log").read_bytes().startswith(b"old\n")


def test_read_and_mkdir_faults_are_typed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "f").write_bytes(b"x")
    injector = Injector(monkeypatch)
    with FsRoot.open(tmp_path) as root:
        for code, expected in EXPECTED.items():
            injector.arm("open", 1, code)
            with pytest.raises(expected):
                root.read_bytes("f")
            injector.arm("mkdir", 1, code)
            with pytest.raises(expected):
                root.mkdir("run", exclusive=True)
            injector.arm("unlink", 1, code)
            with pytest.raises(expected):
                root.remove("f")
    assert (tmp_path / "f").read_bytes() == b"x"


# ------------------------------------------------------------------ a real small file system


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    try:
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k,nr_inodes=64,mode=0700", "tmpfs", mount_point],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot run mount: {exc}")
    if result.returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", mount_point], capture_output=True, timeout=10)


def test_real_full_file_system(tiny_tmpfs: Path) -> None:
    with FsRoot.open(tiny_tmpfs) as root:
        with pytest.raises(NoSpace) as info:
            root.write_bytes("big/blob.bin", os.urandom(256 * 1024))
        assert info.value.errno == errno.ENOSPC
        assert leftovers(tiny_tmpfs) == []
        assert not (tiny_tmpfs / "big" / "blob.bin").exists()

        written = []
        with pytest.raises(NoSpace):
            for i in range(1000):
                root.write_bytes(f"many/f{i}", bytes([i % 256]) * 3000)
                written.append(i)
        assert written, "nothing fit at all"
        assert leftovers(tiny_tmpfs) == []
        for i in written:
            assert root.read_bytes(f"many/f{i}") == bytes([i % 256]) * 3000
        root.remove_tree("many")
        root.write_bytes("after.json", b"{}")  # space is usable again
        assert root.read_bytes("after.json") == b"{}"


def test_real_read_only_file_system(tiny_tmpfs: Path) -> None:
    with FsRoot.open(tiny_tmpfs) as root:
        root.write_bytes("kept.json", b"{}")
        remount = subprocess.run(
            ["mount", "-o", "remount,ro", tiny_tmpfs], capture_output=True, timeout=10
        )
        if remount.returncode != 0:
            pytest.skip("remounting read-only is not permitted here")
        with pytest.raises(ReadOnlyFs) as info:
            root.write_bytes("new.json", b"{}")
        assert "read-only" in str(info.value)
        with pytest.raises(ReadOnlyFs):
            root.append_line("kept.json", b"x")
        assert root.read_bytes("kept.json") == b"{}"
