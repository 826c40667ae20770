"""FsRoot confinement: a hostile-path corpus (after Go's root_test.go) and baseline behaviour.

Every corpus case must be refused with the expected typed error or written safely inside
the root; a scan afterwards shows nothing changed outside the root and no temp file left.
Cases run twice: with the openat2 fast path and with the plain component walk.
"""

from __future__ import annotations

import errno
import hashlib
import os
import socket
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from runjournal.adapters import fsroot
from runjournal.adapters.fsroot import (
    TEMP_PREFIX,
    AlreadyExists,
    FsError,
    FsIOError,
    FsNotFound,
    FsRoot,
    NoSpace,
    NotADirectory,
    NotRegularFile,
    PathRefused,
    PermissionDeniedError,
    ReadOnlyFs,
    SymlinkRefused,
    classify_os_error,
)
from runjournal.domain.logical_names import LogicalNameError, NameRefusal, check_logical_names

PAYLOAD = b"payload\n"
SECRET = b"outside secret\n"

Setup = Callable[[Path, Path], None]
Action = Callable[[FsRoot, Path], object]
Check = Callable[[Path, Path], None]


@pytest.fixture(params=["openat2", "walk"])
def resolution(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "walk":
        monkeypatch.setattr(fsroot, "_openat2_enabled", False)
    elif not fsroot._openat2_enabled:
        pytest.skip("openat2 is not available here")
    return str(request.param)


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    root.mkdir()
    (outside / "dir").mkdir(parents=True)
    (outside / "secret.txt").write_bytes(SECRET)
    (outside / "dir" / "inner.txt").write_bytes(SECRET)
    (outside / f"{TEMP_PREFIX}bait").write_bytes(SECRET)
    monkeypatch.chdir(root)  # short relative paths for AF_UNIX bind
    yield root, outside


def snapshot(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """Everything under tmp_path except the root: kind and content/target per entry."""
    seen: dict[str, tuple[str, str]] = {}
    for directory, dirs, files in os.walk(tmp_path):
        if Path(directory) == tmp_path:
            dirs[:] = [d for d in dirs if d != "root"]
        for entry in dirs + files:
            path = Path(directory, entry)
            relative = str(path.relative_to(tmp_path))
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                seen[relative] = ("link", os.readlink(path))
            elif stat.S_ISREG(mode):
                seen[relative] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
            else:
                seen[relative] = ("other", oct(mode))
    return seen


def temp_files(root: Path) -> list[str]:
    return [
        os.path.join(directory, name)
        for directory, dirs, files in os.walk(root)
        for name in dirs + files
        if name.startswith(TEMP_PREFIX)
    ]


# ------------------------------------------------------------------ corpus building blocks


def write(name: str, *, overwrite: bool = True) -> Action:
    return lambda r, _: r.write_bytes(name, PAYLOAD, overwrite=overwrite)


def read(name: str) -> Action:
    return lambda r, _: r.read_bytes(name)


def append(name: str) -> Action:
    return lambda r, _: r.append_line(name, b"line")


def links(**pairs: str) -> Setup:
    """Symlinks in the root; targets may use {root} and {outside}."""

    def setup(root: Path, outside: Path) -> None:
        for link, target in pairs.items():
            (root / link.replace("__", "/")).symlink_to(target.format(root=root, outside=outside))

    return setup


def both(*setups: Setup) -> Setup:
    def setup(root: Path, outside: Path) -> None:
        for one in setups:
            one(root, outside)

    return setup


def dirs(*names: str) -> Setup:
    def setup(root: Path, _: Path) -> None:
        for name in names:
            (root / name).mkdir(parents=True)

    return setup


def fifo(name: str) -> Setup:
    return lambda root, _: os.mkfifo(root / name)


def sock(name: str) -> Setup:
    def setup(root: Path, _: Path) -> None:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(name)  # relative to the root (cwd)
        server.close()

    return setup


def regular(name: str) -> Setup:
    return lambda root, _: (root / name).write_bytes(b"x")


def hardlink(name: str) -> Setup:
    return lambda root, outside: os.link(outside / "secret.txt", root / name)


def holds_payload(name: str) -> Check:
    def check(root: Path, _: Path) -> None:
        path = root / name
        assert stat.S_ISREG(path.lstat().st_mode)
        assert path.read_bytes() == PAYLOAD
        assert stat.S_IMODE(path.stat().st_mode) == 0o600

    return check


def gone(name: str) -> Check:
    return lambda root, _: (not os.path.lexists(root / name)) or pytest.fail(f"{name} remains")


def nothing(root: Path, outside: Path) -> None:
    return None


@dataclass(frozen=True)
class Case:
    id: str
    action: Action
    outcome: type[FsError] | Check  # an error type: refused; a check: written safely
    setup: Setup = nothing


LEXICAL = [
    "../escape",
    "a/../../escape",
    "a/..",
    "./a",
    "..",
    ".",
    "~",
    "~/x",
    "~root/x",
    "a\\..\\..\\b",
    "..\\escape",
    "C:\\x",
    "C:/x",
    "c:x",
    "a\x00b",
    "\x00",
    "a\nb",
    "a\rb",
    "\x1b[31mred",
    "a\x7fb",
    "a\u202eb",
    "",
    "a//b",
    "a/",
    "/",
    "x" * 256,
    "/".join(["y" * 200] * 6),
    "\udcff",
    f"{TEMP_PREFIX}abc",
    f"d/{TEMP_PREFIX}x",
]

CASES = [
    Case("absolute-outside", lambda r, o: r.write_bytes(str(o / "abs"), PAYLOAD), PathRefused),
    Case("absolute-read", lambda r, o: r.read_bytes(str(o / "secret.txt")), PathRefused),
    # accepted by FsRoot, written inside (the logical layer refuses some of them)
    Case("nine-components", write("a/b/c/d/e/f/g/h/i/j"), holds_payload("a/b/c/d/e/f/g/h/i/j")),
    Case("reserved-name", write("manifest.json"), holds_payload("manifest.json")),
    Case("dot-file", write(".hidden"), holds_payload(".hidden")),
    Case("255-byte-component", write("x" * 255), holds_payload("x" * 255)),
    Case("unicode", write("caf\u00e9/\u00fc.json"), holds_payload("caf\u00e9/\u00fc.json")),
    # symlinks on the path, whatever they point at
    Case("link-dir-outside", write("l/x"), SymlinkRefused, links(l="{outside}")),
    Case("link-dir-outside-deep", write("l/dir/x"), SymlinkRefused, links(l="{outside}")),
    Case("link-read-outside", read("l/secret.txt"), SymlinkRefused, links(l="{outside}")),
    Case(
        "link-exists", lambda r, _: r.exists("l/secret.txt"), SymlinkRefused, links(l="{outside}")
    ),
    Case("link-listdir", lambda r, _: r.listdir("l"), SymlinkRefused, links(l="{outside}")),
    Case("link-subroot", lambda r, _: r.subroot("l"), SymlinkRefused, links(l="{outside}")),
    Case("link-mkdir", lambda r, _: r.mkdir("l/new"), SymlinkRefused, links(l="{outside}")),
    Case("link-mkdir-self", lambda r, _: r.mkdir("l"), SymlinkRefused, links(l="{outside}")),
    Case("link-append", append("l/log"), SymlinkRefused, links(l="{outside}")),
    Case("link-to-parent", write("up/outside/x"), SymlinkRefused, links(up="..")),
    Case("link-relative-escape", write("e/x"), SymlinkRefused, links(e="../outside")),
    Case(
        "chain-inside",
        write("a/x"),
        SymlinkRefused,
        both(dirs("real"), links(a="b", b="real")),
    ),
    Case("chain-escaping", write("c1/x"), SymlinkRefused, links(c1="c2", c2="../outside")),
    Case(
        "absolute-link-inside",
        write("abs/x"),
        SymlinkRefused,
        both(dirs("real"), links(abs="{root}/real")),
    ),
    Case("d-d-dotdot", write("d/d/x"), SymlinkRefused, both(dirs("d"), links(d__d=".."))),
    Case(
        "d-d-dotdot-repeated",
        write("d/d/d/d/x"),
        SymlinkRefused,
        both(dirs("d"), links(d__d="..")),
    ),
    Case("cycle-write", write("loop1/x"), SymlinkRefused, links(loop1="loop2", loop2="loop1")),
    Case("cycle-read", read("loop1"), SymlinkRefused, links(loop1="loop2", loop2="loop1")),
    Case("self-loop", write("me/x"), SymlinkRefused, links(me="me")),
    # planted entries at the final name
    Case(
        "final-link-overwrite",
        write("out.json"),
        holds_payload("out.json"),
        links(**{"out.json": "{outside}/secret.txt"}),
    ),
    Case(
        "final-link-no-clobber",
        write("out.json", overwrite=False),
        AlreadyExists,
        links(**{"out.json": "{outside}/secret.txt"}),
    ),
    Case(
        "final-dangling-link-no-clobber",
        write("out.json", overwrite=False),
        AlreadyExists,
        links(**{"out.json": "{outside}/new.txt"}),
    ),
    Case(
        "final-dangling-link-append",
        append("log"),
        SymlinkRefused,
        links(log="{outside}/new.txt"),
    ),
    Case("final-link-read", read("l"), SymlinkRefused, links(l="{outside}/secret.txt")),
    Case("final-link-append", append("l"), SymlinkRefused, links(l="{outside}/secret.txt")),
    Case("hardlink-overwrite", write("h.json"), holds_payload("h.json"), hardlink("h.json")),
    Case("hardlink-append", append("h.log"), NotRegularFile, hardlink("h.log")),
    Case("fifo-overwrite", write("f"), holds_payload("f"), fifo("f")),
    Case("fifo-read", read("f"), NotRegularFile, fifo("f")),
    Case("fifo-append", append("f"), NotRegularFile, fifo("f")),
    Case("fifo-on-path", write("f/x"), NotADirectory, fifo("f")),
    Case("socket-read", read("s"), NotRegularFile, sock("s")),
    Case("socket-append", append("s"), NotRegularFile, sock("s")),
    Case("socket-on-path", write("s/x"), NotADirectory, sock("s")),
    Case("socket-overwrite", write("s"), holds_payload("s"), sock("s")),
    Case("file-on-path", write("file/x"), NotADirectory, regular("file")),
    Case("file-on-path-read", read("file/x"), NotADirectory, regular("file")),
    Case("dir-at-final-write", write("dir"), NotRegularFile, dirs("dir")),
    Case("dir-at-final-read", read("dir"), NotRegularFile, dirs("dir")),
    Case("dir-at-final-append", append("dir"), NotRegularFile, dirs("dir")),
    Case("dir-at-final-remove", lambda r, _: r.remove("dir"), NotRegularFile, dirs("dir")),
    Case(
        "mkdir-exclusive-existing",
        lambda r, _: r.mkdir("dir", exclusive=True),
        AlreadyExists,
        dirs("dir"),
    ),
    Case("mkdir-over-file", lambda r, _: r.mkdir("file"), NotADirectory, regular("file")),
    # removal never follows a link
    Case("remove-link", lambda r, _: r.remove("l"), gone("l"), links(l="{outside}/secret.txt")),
    Case("remove-tree-link", lambda r, _: r.remove_tree("l"), gone("l"), links(l="{outside}")),
    Case(
        "remove-tree-with-inner-link",
        lambda r, _: r.remove_tree("t"),
        gone("t"),
        both(dirs("t/u"), links(t__u__l="{outside}", t__m="{outside}/secret.txt")),
    ),
    Case(
        "sweep-skips-linked-dir",
        lambda r, _: r.sweep_temp_files() == [] or pytest.fail("swept through a link"),
        nothing,
        links(l="{outside}"),
    ),
    Case("missing-read", read("no/such"), FsNotFound),
    Case("missing-remove", lambda r, _: r.remove("nope"), FsNotFound),
]


@pytest.mark.parametrize("name", LEXICAL, ids=lambda n: repr(n)[:40])
def test_lexically_hostile_names_are_refused(
    name: str, layout: tuple[Path, Path], tmp_path: Path, resolution: str
) -> None:
    root_path, _ = layout
    before = snapshot(tmp_path)
    with FsRoot.open(root_path) as root:
        for operation in (
            lambda: root.write_bytes(name, PAYLOAD),
            lambda: root.read_bytes(name),
            lambda: root.append_line(name, b"x"),
            lambda: root.mkdir(name),
            lambda: root.remove_tree(name),
            lambda: root.exists(name),
        ):
            with pytest.raises(PathRefused) as info:
                operation()
            assert "\n" not in str(info.value) and "\x00" not in str(info.value)
    assert snapshot(tmp_path) == before
    assert os.listdir(root_path) == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_hostile_corpus(
    case: Case, layout: tuple[Path, Path], tmp_path: Path, resolution: str
) -> None:
    root_path, outside = layout
    case.setup(root_path, outside)
    before = snapshot(tmp_path)
    with FsRoot.open(root_path) as root:
        if isinstance(case.outcome, type):
            with pytest.raises(case.outcome) as info:
                case.action(root, outside)
            text = str(info.value)
            assert "\n" not in text and "Traceback" not in text
        else:
            case.action(root, outside)
            case.outcome(root_path, outside)
    assert snapshot(tmp_path) == before, "something changed outside the root"
    assert temp_files(root_path) == []


def test_corpus_is_large_enough() -> None:
    assert len(LEXICAL) + len(CASES) >= 30


@pytest.mark.parametrize(
    ("names", "refusal"),
    [
        (["manifest.json"], NameRefusal.RESERVED),
        (["REPORT.json"], NameRefusal.RESERVED),
        (["error.log/x"], NameRefusal.RESERVED),
        (["out/A.json", "out/a.json"], NameRefusal.CASE_COLLISION),
        (["Glossary.md", "glossary.MD"], NameRefusal.CASE_COLLISION),
        (["x.json", "x.json"], NameRefusal.DUPLICATE),
        (["a", "a/b"], NameRefusal.PATH_CLASH),
        ([".hidden"], NameRefusal.LEADING_DOT),
        (["a/.git/x"], NameRefusal.LEADING_DOT),
        (["a/b/c/d/e/f/g/h/i"], NameRefusal.TOO_MANY_COMPONENTS),
        (["../x"], NameRefusal.DOT_COMPONENT),
        (["/abs"], NameRefusal.ABSOLUTE),
        (["~/x"], NameRefusal.BAD_CHARACTER),
        (["C:x"], NameRefusal.BAD_CHARACTER),
        (["a\\b"], NameRefusal.BACKSLASH),
        (["a\x00"], NameRefusal.NUL),
        (["a\nb"], NameRefusal.CONTROL_CHARACTER),
    ],
)
def test_logical_layer_refuses_before_anything_is_written(
    names: list[str], refusal: NameRefusal, tmp_path: Path
) -> None:
    """The CLI's order: validate every logical name, then allocate and write."""
    with pytest.raises(LogicalNameError) as info:
        for name in check_logical_names(names):
            raise AssertionError(f"{name} should not get this far")
    assert info.value.refusal is refusal
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ baseline behaviour


@pytest.fixture
def root(tmp_path: Path) -> Iterator[FsRoot]:
    with FsRoot.open(tmp_path / "r", create=True) as opened:
        yield opened


def test_open_create_makes_private_parents(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        with FsRoot.open(tmp_path / "p" / "q" / "r", create=True) as opened:
            assert opened.path == str((tmp_path / "p" / "q" / "r").resolve())
    finally:
        os.umask(old)
    for part in ("p", "p/q", "p/q/r"):
        assert stat.S_IMODE((tmp_path / part).stat().st_mode) == 0o700


def test_open_missing_root_without_create(tmp_path: Path) -> None:
    with pytest.raises(FsNotFound):
        FsRoot.open(tmp_path / "missing")


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077, 0o277])
def test_modes_are_private_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        with FsRoot.open(tmp_path, create=True) as opened:
            opened.write_bytes("a/b/file.json", b"{}")
            opened.append_line("a/log", b"x")
            opened.mkdir("c/d")
    finally:
        os.umask(old)
    for directory in ("a", "a/b", "c", "c/d"):
        assert stat.S_IMODE((tmp_path / directory).stat().st_mode) == 0o700
    for file in ("a/b/file.json", "a/log"):
        assert stat.S_IMODE((tmp_path / file).stat().st_mode) == 0o600


def test_write_read_overwrite_and_no_clobber(root: FsRoot) -> None:
    root.write_bytes("steps/s/lane.json", b"one")
    assert root.read_bytes("steps/s/lane.json") == b"one"
    root.write_bytes("steps/s/lane.json", bytearray(b"two"))
    assert root.read_bytes("steps/s/lane.json") == b"two"
    with pytest.raises(AlreadyExists) as info:
        root.write_bytes("steps/s/lane.json", b"three", overwrite=False)
    assert info.value.errno == errno.EEXIST and info.value.name == "steps/s/lane.json"
    assert root.read_bytes("steps/s/lane.json") == b"two"
    root.write_bytes("steps/s/new.json", memoryview(b"four"), overwrite=False)
    assert root.read_bytes("steps/s/new.json") == b"four"
    assert root.listdir("steps/s") == ["lane.json", "new.json"]
    assert temp_files(Path(root.path)) == []


def test_large_and_empty_files(root: FsRoot) -> None:
    big = os.urandom(3 * 1024 * 1024 + 17)
    root.write_bytes("big.bin", big)
    root.write_bytes("empty", b"")
    assert root.read_bytes("big.bin") == big
    assert root.read_bytes("empty") == b""


def test_listdir_exists_remove(root: FsRoot) -> None:
    assert root.listdir() == []
    root.write_bytes("b", b"")
    root.write_bytes("a/x", b"")
    assert root.listdir() == ["a", "b"]
    assert root.listdir() == ["a", "b"]  # the shared root fd is not left at its end
    assert root.exists("a/x") and root.exists("a") and not root.exists("a/y")
    assert not root.exists("nope/deeper")
    root.remove("a/x")
    assert not root.exists("a/x")
    root.remove("a/x", missing_ok=True)
    root.remove("no/such/dir", missing_ok=True)
    with pytest.raises(FsNotFound):
        root.remove("a/x")
    with pytest.raises(FsNotFound):
        root.listdir("nope")


def test_remove_tree(root: FsRoot) -> None:
    root.write_bytes("t/a/b/c", b"")
    root.write_bytes("t/d", b"")
    root.remove_tree("t")
    assert root.listdir() == []
    root.remove_tree("t", missing_ok=True)
    with pytest.raises(FsNotFound):
        root.remove_tree("t")
    root.write_bytes("single", b"")
    root.remove_tree("single")
    assert not root.exists("single")


def test_mkdir_and_subroot(root: FsRoot) -> None:
    root.mkdir("runs")
    root.mkdir("runs")  # idempotent unless exclusive
    root.mkdir("runs/20261130T150405Z-1a2b3c4d", exclusive=True)
    with pytest.raises(AlreadyExists):
        root.mkdir("runs/20261130T150405Z-1a2b3c4d", exclusive=True)
    with root.subroot("runs/20261130T150405Z-1a2b3c4d") as run:
        assert run.path == os.path.join(root.path, "runs", "20261130T150405Z-1a2b3c4d")
        run.write_bytes("report.json", b"{}")
        with pytest.raises(PathRefused):
            run.write_bytes("../escape", b"")
    assert root.read_bytes("runs/20261130T150405Z-1a2b3c4d/report.json") == b"{}"
    with pytest.raises(FsNotFound):
        root.subroot("absent")
    with root.subroot("made/here", create=True) as made:
        made.write_bytes("f", b"1")
    assert root.read_bytes("made/here/f") == b"1"


def test_append_line_creates_then_appends(root: FsRoot) -> None:
    root.append_line("logs/error.log", b"first")
    root.append_line("logs/error.log", b"second\n")
    assert root.read_bytes("logs/error.log") == b"first\nsecond\n"


def test_sweep_finds_and_removes_only_temp_files(root: FsRoot) -> None:
    base = Path(root.path)
    root.write_bytes("a/keep.json", b"k")
    (base / f"{TEMP_PREFIX}0001").write_bytes(b"")
    (base / "a" / f"{TEMP_PREFIX}0002").write_bytes(b"partial")
    (base / "a" / f"{TEMP_PREFIX}dir").mkdir()  # a directory is not a temp file
    expected = [f"{TEMP_PREFIX}0001", f"a/{TEMP_PREFIX}0002"]
    assert root.sweep_temp_files(dry_run=True) == expected
    assert (base / f"{TEMP_PREFIX}0001").exists()
    assert root.sweep_temp_files() == expected
    assert root.sweep_temp_files() == []
    assert root.read_bytes("a/keep.json") == b"k"
    assert (base / "a" / f"{TEMP_PREFIX}dir").is_dir()


def test_closed_root_refuses_use(tmp_path: Path) -> None:
    opened = FsRoot.open(tmp_path)
    opened.close()
    opened.close()
    assert opened.closed
    with pytest.raises(ValueError):
        opened.write_bytes("x", b"")
    with pytest.raises(ValueError):
        opened.listdir()


def test_name_must_be_str(root: FsRoot) -> None:
    with pytest.raises(TypeError):
        root.write_bytes(b"x", b"")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (errno.ENOENT, FsNotFound),
        (errno.EEXIST, AlreadyExists),
        (errno.EACCES, PermissionDeniedError),
        (errno.EPERM, PermissionDeniedError),
        (errno.ENOSPC, NoSpace),
        (errno.EDQUOT, NoSpace),
        (errno.EROFS, ReadOnlyFs),
        (errno.ELOOP, SymlinkRefused),
        (errno.ENOTDIR, NotADirectory),
        (errno.EISDIR, NotRegularFile),
        (errno.ENAMETOOLONG, PathRefused),
        (errno.EIO, FsIOError),
        (errno.EBADF, FsIOError),
    ],
)
def test_classify_os_error(code: int, kind: type[FsError]) -> None:
    original = OSError(code, os.strerror(code))
    error = classify_os_error(original, "out/x\n.json")
    assert type(error) is kind
    assert isinstance(error, OSError) and error.errno == code
    assert error.name == "out/x\n.json"
    text = str(error)
    assert text.startswith("'out/x\\n.json': ") and "\n" not in text
    assert classify_os_error(error, "other") is error
