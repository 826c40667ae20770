"""Confined, atomic, private file access beneath one trusted directory.

Modelled on Go 1.24's ``os.Root`` (see docs/internals.md "FsRoot"): the root directory is trusted,
every name beneath it is not. A name is first checked lexically, then resolved one component at a
time with ``O_NOFOLLOW`` relative to an open directory fd, so neither ``..`` nor a symbolic
link, not even one swapped in while we work, can lead outside the root. Symbolic links are
refused everywhere beneath the root, even those pointing inside it.

Writes are atomic and durable: a temp file in the same directory, fsync, rename (or link
for no-clobber), fsync of the directory. A caller that makes a whole group durable at once
writes with ``durable=False`` and then calls :meth:`FsRoot.sync` (one ``syncfs``) before it
relies on them (docs/internals.md "Group durability"). Directories are created 0700 and
files 0600 whatever the umask. Every failure is a typed :class:`FsError` whose str() is one
line.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import shutil
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import ClassVar, Self

from runjournal.domain.lazy_pattern import LazyPattern

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "MAX_COMPONENT_BYTES",
    "MAX_NAME_BYTES",
    "TEMP_PREFIX",
    "AlreadyExists",
    "FsError",
    "FsIOError",
    "FsNotFound",
    "FsRoot",
    "NoSpace",
    "NotADirectory",
    "NotRegularFile",
    "PathRefused",
    "PermissionDeniedError",
    "ReadOnlyFs",
    "SymlinkRefused",
    "classify_os_error",
]

TEMP_PREFIX = ".rj-tmp-"
MAX_COMPONENT_BYTES = 255
MAX_NAME_BYTES = 1024
DIR_MODE = 0o700
FILE_MODE = 0o600

# O_NONBLOCK everywhere we open an existing entry: a planted FIFO must not block the run.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_MAX_SWEEP_DEPTH = 64
_READ_CHUNK = 1 << 20


# --------------------------------------------------------------------------- errors


class FsError(OSError):
    """A file-system failure under a root: ``.name`` is the logical name, ``.errno`` the cause."""

    problem: ClassVar[str] = "file system error"

    def __init__(self, name: str, errno_: int | None = None, detail: str | None = None) -> None:
        self.detail = detail or self.problem
        super().__init__(errno_, self.detail)
        self.name = name

    def __str__(self) -> str:
        return f"{_shown(self.name)}: {self.detail}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, errno={self.errno}, {self.detail!r})"

    def __reduce__(self) -> tuple[type[FsError], tuple[str, int | None, str]]:
        return (type(self), (self.name, self.errno, self.detail))


class PathRefused(FsError):
    problem = "path refused"


class SymlinkRefused(FsError):
    problem = "refused: a symbolic link is on the path"


class FsNotFound(FsError):
    problem = "not found"


class AlreadyExists(FsError):
    problem = "already exists"


class PermissionDeniedError(FsError):
    problem = "permission denied"


class NoSpace(FsError):
    problem = "no space left on the file system"


class ReadOnlyFs(FsError):
    problem = "the file system is read-only"


class NotRegularFile(FsError):
    problem = "not a regular file"


class NotADirectory(FsError):
    problem = "a path component is not a directory"


class FsIOError(FsError):
    problem = "input/output error"


_BY_ERRNO: dict[int, type[FsError]] = {
    errno.ENOENT: FsNotFound,
    errno.EEXIST: AlreadyExists,
    errno.EACCES: PermissionDeniedError,
    errno.EPERM: PermissionDeniedError,
    errno.ENOSPC: NoSpace,
    errno.EDQUOT: NoSpace,
    errno.EROFS: ReadOnlyFs,
    errno.ELOOP: SymlinkRefused,
    errno.ENOTDIR: NotADirectory,
    errno.EISDIR: NotRegularFile,
    errno.ENXIO: NotRegularFile,  # a FIFO or socket opened O_NONBLOCK with no peer
    errno.ENAMETOOLONG: PathRefused,
}


def classify_os_error(exc: OSError, name: str) -> FsError:
    """Map an OSError to the typed FsError for logical `name` (FsErrors pass through)."""
    if isinstance(exc, FsError):
        return exc
    kind = _BY_ERRNO.get(exc.errno or 0, FsIOError)
    detail = None
    if kind is FsIOError or exc.errno == errno.EDQUOT:
        detail = (exc.strerror or "input/output error").lower()
    elif exc.errno == errno.ENXIO:
        detail = "not a regular file (a FIFO, socket or device)"
    error = kind(name, exc.errno, detail)
    error.__cause__ = exc
    return error


def _shown(name: object, limit: int = 160) -> str:
    """repr() escapes control, bidi and other non-printable characters; bound the length."""
    text = repr(name)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@contextlib.contextmanager
def _classified(name: str) -> Iterator[None]:
    """Turn any raw OSError escaping the block into the typed error for `name`."""
    try:
        yield
    except FsError:
        raise
    except OSError as exc:
        raise classify_os_error(exc, name) from exc


# --------------------------------------------------------------------------- lexical checks

_DRIVE = LazyPattern(r"[A-Za-z]:")


def _split(name: str) -> list[str]:
    """Check a name lexically (docs/internals.md "Logical output names"), returning
    its components."""
    if not isinstance(name, str):
        raise TypeError(f"name must be str, not {type(name).__name__}")
    reason = _lexical_refusal(name)
    if reason is not None:
        raise PathRefused(name, None, f"path refused: {reason}")
    return name.split("/")


# Names that pass every check below at a glance: ASCII components of at most 255
# characters that start with a letter, digit or `_` (so never `.`, `..`, `~`, a drive
# letter or the temp prefix), joined by single `/`. Checkpoint and output names are of
# this kind; one regex replaces the loop for them, see
# docs/performance.md "Fully cached `run --resume`".
_PLAIN_PART = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}"
_PLAIN_NAME = LazyPattern(rf"{_PLAIN_PART}(?:/{_PLAIN_PART})*")


def _lexical_refusal(name: str) -> str | None:
    if len(name) <= MAX_NAME_BYTES and _PLAIN_NAME.fullmatch(name):
        return None
    if not name:
        return "the name is empty"
    if len(name) > MAX_NAME_BYTES:
        return f"longer than {MAX_NAME_BYTES} bytes"
    if "\x00" in name:
        return "contains a NUL character"
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        return "not valid UTF-8"
    if not name.isprintable():
        return "contains a control or non-printable character"
    if len(encoded) > MAX_NAME_BYTES:
        return f"longer than {MAX_NAME_BYTES} bytes"
    if "\\" in name:
        return "contains a backslash"
    if name.startswith("/"):
        return "absolute path"
    if name.startswith("~"):
        return "starts with '~'"
    if _DRIVE.match(name):
        return "starts with a drive letter"
    for part in name.split("/"):
        if not part:
            return "empty path component"
        if part in (".", ".."):
            return "'.' or '..' component"
        if len(part.encode("utf-8")) > MAX_COMPONENT_BYTES:
            return f"component longer than {MAX_COMPONENT_BYTES} bytes"
        if part.startswith(TEMP_PREFIX):
            return f"component uses the reserved temp-file prefix {TEMP_PREFIX!r}"
    return None


# --------------------------------------------------------------------------- openat2 layer

# openat2(2) resolves a whole path in the kernel with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS:
# one syscall instead of one per component, and a second, independent confinement check.
# It is only a fast path: on any failure the component walk below runs and decides.
_SYS_OPENAT2 = 437  # the same number on every Linux architecture but alpha
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


def _load_syscall() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux") or os.uname().machine == "alpha":
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_long
    return function


_syscall = _load_syscall()
_openat2_enabled = _syscall is not None
_DIR_HOW = _OpenHow(_DIR_FLAGS, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)


def _openat2_dir(dir_fd: int, relative: str) -> int | None:
    """Open directory `relative` beneath `dir_fd`; None means "use the component walk"."""
    global _openat2_enabled
    if not _openat2_enabled or _syscall is None:
        return None
    fd = _syscall(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_long(dir_fd),
        ctypes.c_char_p(relative.encode("utf-8")),
        ctypes.byref(_DIR_HOW),
        ctypes.c_size_t(ctypes.sizeof(_DIR_HOW)),
    )
    if fd >= 0:
        return int(fd)
    if ctypes.get_errno() in (errno.ENOSYS, errno.EPERM):  # old kernel or seccomp filter
        _openat2_enabled = False
    return None


# --------------------------------------------------------------------------- fd-level steps


def _open_child_dir(
    dir_fd: int, part: str, name: str, *, create: bool, durable: bool = True
) -> int:
    """Open directory `part` inside `dir_fd` without following links, creating it if asked."""
    try:
        return os.open(part, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            raise
    except OSError as exc:
        raise _classify_entry(exc, dir_fd, part, name) from exc
    return _make_child_dir(dir_fd, part, name, exclusive=False, durable=durable)


def _make_child_dir(
    dir_fd: int, part: str, name: str, *, exclusive: bool, durable: bool = True
) -> int:
    """mkdir `part` 0700 inside `dir_fd` (fsync the parent when `durable`); return its fd."""
    try:
        os.mkdir(part, DIR_MODE, dir_fd=dir_fd)
        created = True
    except FileExistsError as exc:
        if exclusive:
            raise AlreadyExists(name, errno.EEXIST) from exc
        created = False  # already there (or a concurrent creator won); the open checks it
    try:
        fd = os.open(part, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise _classify_entry(exc, dir_fd, part, name) from exc
    if created:
        try:
            os.fchmod(fd, DIR_MODE)
            if durable:
                os.fsync(dir_fd)
        except BaseException:
            os.close(fd)
            raise
    return fd


def _classify_entry(exc: OSError, dir_fd: int, part: str, name: str) -> FsError:
    """Explain a failed open of `part`: O_NOFOLLOW reports a symlink as ELOOP or ENOTDIR."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        try:
            mode = os.stat(part, dir_fd=dir_fd, follow_symlinks=False).st_mode
        except OSError:
            mode = 0
        if stat.S_ISLNK(mode):
            return SymlinkRefused(name, exc.errno, f"refused: {part!r} is a symbolic link")
        if mode and not stat.S_ISDIR(mode) and exc.errno == errno.ENOTDIR:
            return NotADirectory(name, exc.errno, f"{part!r} is not a directory")
    return classify_os_error(exc, name)


def _open_leaf(dir_fd: int, part: str, name: str, flags: int, mode: int = FILE_MODE) -> int:
    try:
        return os.open(part, flags, mode, dir_fd=dir_fd)
    except OSError as exc:
        raise _classify_entry(exc, dir_fd, part, name) from exc


def _write_all(fd: int, data: bytes) -> None:
    """os.write may write less than asked; loop until everything is out."""
    view = memoryview(data).cast("B")
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.EIO, "write made no progress")
        view = view[written:]


def _read_all(fd: int, size: int = -1) -> bytes:
    """The file's bytes; one read(2) when `size` (from fstat) is right, as it is unless the
    file changes meanwhile (a short read of a regular file means end of file)."""
    chunks = []
    if 0 <= size < _READ_CHUNK:
        first = os.read(fd, size + 1)
        if len(first) == size:
            return first
        chunks.append(first)  # the file changed size since fstat: read on to the end
    while chunk := os.read(fd, _READ_CHUNK):
        chunks.append(chunk)
    return b"".join(chunks)


def _read_regular(dir_fd: int, leaf: str, name: str) -> bytes:
    fd = _open_leaf(dir_fd, leaf, name, _READ_FLAGS)
    try:
        return _read_all(fd, _require_regular(fd, name, single_link=False))
    finally:
        os.close(fd)


def _require_regular(fd: int, name: str, *, single_link: bool) -> int:
    """Refuse anything but a regular file (with one link if asked); return its size."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise NotRegularFile(name, None, f"not a regular file ({_kind(info.st_mode)})")
    if single_link and info.st_nlink != 1:
        raise NotRegularFile(name, None, f"refused: the file has {info.st_nlink} hard links")
    return info.st_size


def _kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return kind
    return "an unknown file type"


def _unlink_quietly(part: str, dir_fd: int) -> None:
    """Best-effort cleanup on an error path: the original error is what matters."""
    with contextlib.suppress(OSError):
        os.unlink(part, dir_fd=dir_fd)


def _write_temp(dir_fd: int, data: bytes, *, durable: bool = True, mode: int = FILE_MODE) -> str:
    """Create and fill a private temp file in `dir_fd` (fsynced when `durable`); its name."""
    temp = TEMP_PREFIX + secrets.token_hex(8)
    fd = os.open(temp, _TEMP_FLAGS, FILE_MODE, dir_fd=dir_fd)
    try:
        try:
            os.fchmod(fd, mode)
            _write_all(fd, data)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        _unlink_quietly(temp, dir_fd)
        raise
    return temp


def _commit(dir_fd: int, temp: str, leaf: str, name: str, *, overwrite: bool) -> None:
    """Publish `temp` under `leaf`; on failure the temp file is gone and `leaf` untouched."""
    try:
        if overwrite:
            os.replace(temp, leaf, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return
        try:
            os.link(temp, leaf, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError as exc:
            raise AlreadyExists(name, errno.EEXIST) from exc
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except BaseException:
            _unlink_quietly(leaf, dir_fd)
            raise
    except BaseException:
        _unlink_quietly(temp, dir_fd)
        raise


def _sweep(dir_fd: int, prefix: str, found: list[str], *, dry_run: bool, depth: int) -> None:
    removed = False
    with os.scandir(dir_fd) as entries:
        listed = list(entries)
    for entry in listed:
        relative = prefix + entry.name
        is_dir = entry.is_dir(follow_symlinks=False)
        if entry.name.startswith(TEMP_PREFIX) and not is_dir:
            found.append(relative)
            if not dry_run:
                with _classified(relative), contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.name, dir_fd=dir_fd)
                    removed = True
        elif is_dir and depth < _MAX_SWEEP_DEPTH:
            try:
                child = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue  # removed or swapped for a link since the listing: not ours to follow
            try:
                _sweep(child, relative + "/", found, dry_run=dry_run, depth=depth + 1)
            finally:
                os.close(child)
    if removed:
        with _classified(prefix.rstrip("/") or "."):
            os.fsync(dir_fd)


def _ignore_vanished(function: object, path: object, excinfo: object) -> None:
    """shutil.rmtree error hook: an entry already gone is fine, anything else is raised."""
    exc = excinfo if isinstance(excinfo, BaseException) else excinfo[1]  # type: ignore[index]
    if not isinstance(exc, FileNotFoundError):
        raise exc


_IGNORE_VANISHED: dict[str, Callable[..., None]] = (
    {"onexc": _ignore_vanished} if sys.version_info >= (3, 12) else {"onerror": _ignore_vanished}
)


def make_trusted_dirs(path: str) -> None:
    """Create the root and missing parents 0700 (the root path itself is trusted)."""
    missing = []
    current = path
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:
            continue  # a concurrent creator; the final open checks it is a directory
        os.chmod(directory, DIR_MODE)
        parent_fd = os.open(os.path.dirname(directory), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(parent_fd)
        finally:
            os.close(parent_fd)


def _load_syncfs() -> Callable[[int], int] | None:
    """glibc's `syncfs(fd)` (Linux): flush one file system, not every one like `sync()`."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int,)
    function.restype = ctypes.c_int
    return function


_syncfs = _load_syncfs()


def _sync_fs(fd: int) -> None:
    """Make everything written on `fd`'s file system durable; `sync()` where no syncfs."""
    if _syncfs is None:
        os.sync()
        return
    if _syncfs(fd) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def _real_path(fd: int, fallback: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(fallback)


# --------------------------------------------------------------------------- the root


class FsRoot:
    """An open directory beneath which all access is confined. Use :meth:`open`.

    Keeps one fd on the root; each call re-resolves its name from there, so nothing about
    the tree is cached. Safe to share between threads.
    """

    def __init__(self, fd: int, path: str) -> None:
        self._fd = fd
        self._path = path

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, create: bool = False) -> Self:
        """Open the trusted root at `path`; with `create`, make it and its parents 0700."""
        absolute = os.path.abspath(os.fspath(path))
        with _classified(absolute):
            if create:
                make_trusted_dirs(absolute)
            fd = os.open(absolute, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        return cls(fd, _real_path(fd, absolute))

    @property
    def path(self) -> str:
        """Absolute real path of the root, for messages and reports only (never re-opened)."""
        return self._path

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"fd={self._fd}"
        return f"FsRoot({self._path!r}, {state})"

    # ----------------------------------------------------------------- resolution

    def _root_fd(self) -> int:
        if self._fd < 0:
            raise ValueError("operation on a closed FsRoot")
        return self._fd

    def _open_dir(
        self, parts: Sequence[str], name: str, *, create: bool, durable: bool = True
    ) -> int:
        """Return a new fd for the directory `parts` beneath the root (caller closes it)."""
        root = self._root_fd()
        fd = _openat2_dir(root, "/".join(parts))
        if fd is not None:
            return fd
        current = root
        try:
            for part in parts:
                child = _open_child_dir(current, part, name, create=create, durable=durable)
                if current != root:
                    os.close(current)
                current = child
        except BaseException:
            if current != root:
                os.close(current)
            raise
        return current

    @contextlib.contextmanager
    def _dir(
        self, parts: Sequence[str], name: str, *, create: bool, durable: bool = True
    ) -> Iterator[int]:
        """The open directory `parts`; the root's own fd is lent, never closed."""
        if not parts:
            yield self._root_fd()
            return
        fd = self._open_dir(parts, name, create=create, durable=durable)
        try:
            yield fd
        finally:
            os.close(fd)

    # ----------------------------------------------------------------- writing

    def write_bytes(
        self,
        name: str,
        data: bytes,
        *,
        overwrite: bool = True,
        durable: bool = True,
        mode: int = FILE_MODE,
    ) -> None:
        """Atomically and durably make `name` hold `data` (missing parents are created).

        With ``overwrite=False`` an existing entry raises AlreadyExists. If this raises,
        no temp file remains and `name` holds no new data: should the final directory
        fsync fail after the rename, the file is unlinked again because its durability
        is unknown (in overwrite mode the old content is then gone too).

        ``durable=False`` skips every fsync (file, directory, created parents): the write
        is still atomic for readers, but a crash may lose or tear it until a later
        :meth:`sync` of this file system returns. `mode` is the file's permission bits.
        """
        parts = _split(name)
        with (
            _classified(name),
            self._dir(parts[:-1], name, create=True, durable=durable) as dir_fd,
        ):
            temp = _write_temp(dir_fd, data, durable=durable, mode=mode)
            _commit(dir_fd, temp, parts[-1], name, overwrite=overwrite)
            if not durable:
                return
            try:
                os.fsync(dir_fd)
            except BaseException:
                _unlink_quietly(parts[-1], dir_fd)
                raise

    def link(self, name: str, source: FsRoot, source_name: str, *, durable: bool = True) -> None:
        """Make `name` a new hard link to the regular file `source_name` beneath `source`.

        Both names are resolved through their roots' confined walks; missing parents of
        `name` are created. Never replaces: an existing `name` is AlreadyExists. A file
        system that cannot link (EXDEV across mounts, EPERM, EMLINK, ENOTSUP) raises its
        typed error, and the caller copies instead (docs/internals.md "Run outputs as links").
        """
        parts = _split(name)
        source_parts = _split(source_name)
        with (
            _classified(name),
            source._dir(source_parts[:-1], source_name, create=False) as source_fd,
            self._dir(parts[:-1], name, create=True, durable=durable) as dir_fd,
        ):
            info = os.stat(source_parts[-1], dir_fd=source_fd, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):  # never a link to a symlink, FIFO or device
                raise SymlinkRefused(source_name, errno.ELOOP)
            if not stat.S_ISREG(info.st_mode):
                kind = _kind(info.st_mode)
                raise NotRegularFile(source_name, None, f"not a regular file ({kind})")
            os.link(
                source_parts[-1],
                parts[-1],
                src_dir_fd=source_fd,
                dst_dir_fd=dir_fd,
                follow_symlinks=False,
            )
            if durable:
                os.fsync(dir_fd)

    def sync(self) -> None:
        """Make every write on this root's file system durable: one ``syncfs(2)``.

        The group barrier for writes made with ``durable=False`` (docs/internals.md
        "Group durability"); ``sync()`` of every file system where there is no syncfs.
        """
        with _classified("."):
            _sync_fs(self._root_fd())

    def append_line(self, name: str, data: bytes) -> None:
        """Append `data` (plus a newline if missing) to a private log file, creating it 0600.

        The file is opened in place, so it must be a regular file with one link; a planted
        FIFO, hard link or symlink is refused without blocking. Not atomic: a crash may
        leave a torn last line, which readers must tolerate.
        """
        parts = _split(name)
        line = bytes(data) if data.endswith(b"\n") else bytes(data) + b"\n"
        with _classified(name), self._dir(parts[:-1], name, create=True) as dir_fd:
            fd = self._open_for_append(dir_fd, parts[-1], name)
            try:
                _require_regular(fd, name, single_link=True)
                _write_all(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)

    @staticmethod
    def _open_for_append(dir_fd: int, leaf: str, name: str) -> int:
        try:
            return _open_leaf(dir_fd, leaf, name, _APPEND_FLAGS)
        except FsNotFound:
            pass
        fd = _open_leaf(dir_fd, leaf, name, _APPEND_FLAGS | os.O_CREAT | os.O_EXCL)
        try:
            os.fchmod(fd, FILE_MODE)
            os.fsync(dir_fd)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def mkdir(self, name: str, *, exclusive: bool = False) -> None:
        """Create directory `name` 0700 with its parents; `exclusive` makes EEXIST an error.

        An existing entry is accepted (non-exclusive) only if it is a real directory.
        """
        parts = _split(name)
        with _classified(name), self._dir(parts[:-1], name, create=True) as dir_fd:
            os.close(_make_child_dir(dir_fd, parts[-1], name, exclusive=exclusive))

    def replace_symlink(self, name: str, target: str) -> None:
        """Atomically make `name` a symbolic link to `target`, a sibling of `name`.

        `target` is one plain name in the same directory (never `..`, `/` or a temp
        name), so the link can only point inside the root. A temp link is created beside
        `name`, then renamed over it, then the directory is fsynced: a reader sees the old
        link or the new one, never none. An existing entry at `name` that is not a
        symbolic link (a real file or directory) is never replaced: AlreadyExists.
        """
        parts = _split(name)
        if "/" in target or _lexical_refusal(target) is not None:
            raise PathRefused(target, None, "path refused: a link target must be a sibling name")
        leaf = parts[-1]
        with _classified(name), self._dir(parts[:-1], name, create=True) as dir_fd:
            try:
                mode = os.stat(leaf, dir_fd=dir_fd, follow_symlinks=False).st_mode
            except FileNotFoundError:
                mode = None
            if mode is not None and not stat.S_ISLNK(mode):
                raise AlreadyExists(name, errno.EEXIST, "exists and is not a symbolic link")
            temp = TEMP_PREFIX + secrets.token_hex(8)
            os.symlink(target, temp, dir_fd=dir_fd)
            try:
                os.replace(temp, leaf, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                _unlink_quietly(temp, dir_fd)
                raise
            os.fsync(dir_fd)

    def subroot(self, name: str, *, create: bool = False) -> FsRoot:
        """A new root on the directory `name`, resolved through the confined walk."""
        parts = _split(name)
        with _classified(name):
            fd = self._open_dir(parts, name, create=create)
        # The same class: a fake root a test passes in (cli/compose.py) stays fake below.
        return type(self)(fd, os.path.join(self._path, *parts))

    def fd_path(self, name: str) -> str:
        """A path to the entry `name` of this directory that no swap of the root's path redirects.

        For libraries that take only a path (SQLite, docs/internals.md "Backends"):
        `/proc/self/fd/<root fd>/<name>` where `/proc` is mounted, resolved by the kernel
        through the open fd; elsewhere the root's real path (then a swap is not prevented).
        """
        reason = _lexical_refusal(name) if isinstance(name, str) else "not a string"
        if reason is None and "/" in name:
            reason = "more than one component"
        if reason is not None:
            raise PathRefused(str(name), None, f"path refused: {reason}")
        proc = f"/proc/self/fd/{self._root_fd()}"
        if os.path.isdir(proc):
            return f"{proc}/{name}"
        return os.path.join(self._path, name)

    def lock_handle(self) -> int:
        """A new read-only descriptor of this directory itself, for `flock` (the cache
        root's lock, `adapters/cache_lock.py`): its own open file description, so its lock
        is independent of every other descriptor. The caller closes it."""
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        with _classified("."):
            return os.open(".", flags, dir_fd=self._root_fd())

    def open_lock_file(self, name: str) -> int:
        """A read-write descriptor of the lock file `name`, created 0600 with its parents.

        For record locks (`fcntl`), never read or written (the stage leases,
        `adapters/stage_leases.py`): a planted symlink, FIFO or hard link is refused
        without blocking. The caller closes it.
        """
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        return self._open_single(name, flags, create=True)

    def open_file(self, name: str, *, create: bool = False) -> int:
        """A descriptor of the regular file `name` (the packed store's segments): read-only,
        or with `create` a new file (exclusive, 0600, parents made) open for appending and
        reading. A planted symlink, FIFO or hard link is refused. The caller closes it."""
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL if create else os.O_RDONLY
        return self._open_single(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, create=create)

    def _open_single(self, name: str, flags: int, *, create: bool) -> int:
        """`name` opened with `flags`, refused unless a regular file with one link."""
        parts = _split(name)
        with _classified(name), self._dir(parts[:-1], name, create=create) as dir_fd:
            fd = _open_leaf(dir_fd, parts[-1], name, flags)
            try:
                _require_regular(fd, name, single_link=True)
            except BaseException:
                os.close(fd)
                raise
            return fd

    def anonymous_file(self) -> int:
        """A new file with no name in the root's directory (O_TMPFILE, 0600), open for
        reading and writing: gone when its descriptor is closed, whatever happens to the
        process (a run's spool, docs/internals.md "Run outputs as links"). OSError where
        the file system has no O_TMPFILE; the caller closes it."""
        flags = getattr(os, "O_TMPFILE", 0)
        if not flags:
            raise OSError(errno.EOPNOTSUPP, "no O_TMPFILE")
        return os.open(".", flags | os.O_RDWR | os.O_CLOEXEC, 0o600, dir_fd=self._root_fd())

    def append_record(self, name: str, fd: int, data: bytes) -> None:
        """Append `data` to `fd`, a file of this root opened by :meth:`open_file`; `name` is
        the entry the bytes are for (the packed store's record), for the error. Not atomic:
        a failure may leave part of `data` written, which the caller must treat as a torn
        tail."""
        with _classified(name):
            _write_all(fd, data)

    # ----------------------------------------------------------------- reading

    def read_bytes(self, name: str) -> bytes:
        """The content of regular file `name`; FsNotFound if it is missing."""
        parts = _split(name)
        if len(parts) > 1:
            with _classified(name), self._dir(parts[:-1], name, create=False) as dir_fd:
                return _read_regular(dir_fd, parts[-1], name)
        # An entry of the root itself (a checkpoint read through a cached directory handle,
        # docs/internals.md "Libraries and performance"): no context managers on this path.
        try:
            return _read_regular(self._root_fd(), name, name)
        except FsError:
            raise
        except OSError as exc:
            raise classify_os_error(exc, name) from exc

    def exists(self, name: str) -> bool:
        """Whether an entry of any type is at `name` (a symlink there counts as one).

        A symlink or non-directory on the way to it raises, as elsewhere.
        """
        parts = _split(name)
        with _classified(name):
            try:
                with self._dir(parts[:-1], name, create=False) as dir_fd:
                    os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
            except (FileNotFoundError, FsNotFound):
                return False
        return True

    def link_count(self, name: str) -> int:
        """The number of hard links of the entry `name` (never following a symlink)."""
        parts = _split(name)
        with _classified(name), self._dir(parts[:-1], name, create=False) as dir_fd:
            return os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False).st_nlink

    def listdir(self, name: str = "") -> list[str]:
        """Sorted entry names of directory `name` (the root when empty), temp files included."""
        parts = _split(name) if name else []
        with _classified(name or "."), self._dir(parts, name, create=False) as fd:
            return sorted(os.listdir(fd))

    # ----------------------------------------------------------------- removing

    def remove(self, name: str, *, missing_ok: bool = False) -> None:
        """Unlink the non-directory entry `name` (a symlink itself, never its target)."""
        parts = _split(name)
        try:
            with _classified(name), self._dir(parts[:-1], name, create=False) as dir_fd:
                os.unlink(parts[-1], dir_fd=dir_fd)
                os.fsync(dir_fd)
        except FsNotFound:
            if not missing_ok:
                raise

    def remove_tree(self, name: str, *, missing_ok: bool = False) -> None:
        """Delete `name` and everything below it, never following a symlink.

        With `missing_ok`, entries that vanish meanwhile (another remover working on
        the same tree) are not an error either.
        """
        parts = _split(name)
        vanished_ok = _IGNORE_VANISHED if missing_ok else {}
        try:
            with _classified(name), self._dir(parts[:-1], name, create=False) as dir_fd:
                mode = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False).st_mode
                if stat.S_ISDIR(mode):
                    # fd-based rmtree: opens each level O_NOFOLLOW and checks it is the
                    # directory it listed, so a swapped-in symlink is unlinked, not followed.
                    shutil.rmtree(parts[-1], dir_fd=dir_fd, **vanished_ok)
                else:
                    os.unlink(parts[-1], dir_fd=dir_fd)
                os.fsync(dir_fd)
        except FsNotFound:
            if not missing_ok:
                raise

    def rename(self, name: str, new_leaf: str) -> None:
        """Rename the entry `name` to `new_leaf` in the same directory, atomically.

        Never replaces: an existing `new_leaf` is `AlreadyExists` (checked just before the
        rename; the callers own the names they rename to).
        """
        parts = _split(name)
        target = _split(new_leaf)
        if len(target) != 1:
            raise PathRefused(new_leaf, None, "path refused: a rename stays in its directory")
        with _classified(name), self._dir(parts[:-1], name, create=False) as dir_fd:
            try:
                os.stat(new_leaf, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                raise AlreadyExists(new_leaf, errno.EEXIST)
            os.rename(parts[-1], new_leaf, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            os.fsync(dir_fd)

    def sweep_temp_files(self, *, dry_run: bool = False) -> list[str]:
        """Find (and unless `dry_run` remove) ``.rj-tmp-*`` files a killed writer left.

        Returns their names relative to the root, sorted. Symlinked directories are not
        entered. Only call it when no writer is active beneath this root.
        """
        found: list[str] = []
        with _classified("."):
            _sweep(self._root_fd(), "", found, dry_run=dry_run, depth=0)
        return sorted(found)
