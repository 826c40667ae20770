"""Reading the pipeline's inputs and references from disk (phase P3).

Globs are expanded relative to the pipeline file's directory, sorted and
de-duplicated; every file is read once, checked to be UTF-8 text and fingerprinted.
With an input stat cache (`input_check = "stat"`), a file whose stat facts are those
recorded with its digest is not checked nor hashed again (adapters/input_stats.py).
"""

from __future__ import annotations

import glob
import hashlib
import os
import stat
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from runjournal.domain.chunking import SourceError, SourceIsBinary, SourceNotUtf8, check_utf8
from runjournal.domain.names import source_logical_name
from runjournal.domain.pipeline import Source
from runjournal.domain.ports import SourceChanged

if TYPE_CHECKING:
    from runjournal.adapters.input_stats import InputStats


class SourceResolutionError(Exception):
    """One line naming the key (`inputs`, `references`, `--input`) and the file or pattern."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


def expand_patterns(patterns: Iterable[str], *, base_dir: str, key: str) -> list[str]:
    """Absolute real paths of the files the patterns match: sorted, de-duplicated."""
    found: set[str] = set()
    for pattern in patterns:
        full = pattern if os.path.isabs(pattern) else os.path.join(base_dir, pattern)
        full = os.path.expanduser(full)
        globbed = glob.glob(full, recursive=True)
        matches = _real_files(globbed)
        if not matches:
            broken = [m for m in globbed if os.path.islink(m) and not os.path.exists(m)]
            if broken:  # not "matches no file" (issue 32): the file is there, its target not
                name = os.path.relpath(broken[0], base_dir)
                raise SourceResolutionError(
                    key,
                    f"'{pattern}' matches only a broken symbolic link: '{name}' points to "
                    f"'{os.readlink(broken[0])}', which does not exist",
                )
            raise SourceResolutionError(key, f"'{pattern}' matches no file")
        found.update(matches)
    return sorted(found)


def _real_files(paths: list[str]) -> list[str]:
    """`os.path.realpath` of each of `paths` that `os.path.isfile` takes for a file.

    A regular file that is not itself a symbolic link (one `lstat`) is its directory's
    real path (resolved once per directory) joined with its name; a link is resolved
    whole. `realpath` of every file walked its components one `lstat` at a time: 60 us
    a file, most of a resume's input resolution at a thousand small documents
    (docs/performance.md "A corpus at scale: the packed store and what a no-op resume
    costs (issue 29)")."""
    real_dirs: dict[str, str] = {}
    found: list[str] = []
    for path in paths:
        try:
            mode = os.lstat(path).st_mode
        except (OSError, ValueError):
            continue  # gone, or unnameable: not a file for `isfile` either
        if stat.S_ISREG(mode):
            head, name = os.path.split(path)
            real = real_dirs.get(head)
            if real is None:
                real = real_dirs[head] = os.path.realpath(head or os.curdir)
            found.append(os.path.join(real, name))
        elif stat.S_ISLNK(mode) and os.path.isfile(path):
            found.append(os.path.realpath(path))
    return found


def digest(data: bytes) -> str:
    """An input's content digest (a function of its own, so tests can count the hashing)."""
    return hashlib.sha256(data).hexdigest()


def read_known_input(paths: dict[str, str], name: str) -> bytes:
    """The bytes of the input `name` resolved to a path in `paths`; `SourceChanged` when
    it is not one of them or cannot be read (its digest is the caller's to check)."""
    path = paths.get(name)
    if path is None:
        raise SourceChanged(f"input '{name}' is not known here")
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise SourceChanged(f"input '{name}' cannot be read: {exc.strerror}") from None


class SourceFiles:
    """Where a run's inputs are, so that it holds none of their bytes (issue 29: peak RSS):
    an input is read and hashed at resolution, then kept as its name, size and digest
    only, and read again (its digest checked) when its chunks are planned and when an
    extract of it executes (docs/internals.md "Inputs a resume does not read"). The
    `KnownChunks` port without recorded chunks: `input_check = "verify"` records none."""

    def __init__(self) -> None:
        self.paths: dict[str, str] = {}  # logical name -> path (resolution, one thread)

    def chunks(self, source: str, plan_key: str) -> None:
        return None

    def remember(self, source: str, plan_key: str, chunks: list[Any]) -> None:
        pass

    def read(self, source: Source) -> bytes:
        """`source`'s bytes; `SourceChanged` when they are no longer those it was
        resolved with (the file was changed during the run)."""
        data = read_known_input(self.paths, source.name)
        if digest(data) != source.sha256:
            raise SourceChanged(f"input '{source.name}' changed while the run was going")
        return data


def read_text_file(
    path: str,
    *,
    base_dir: str,
    key: str,
    stats: InputStats | None = None,
    defer: bool = False,
    files: SourceFiles | None = None,
    keep_path: bool = False,
) -> Source:
    """`defer`: a file whose stat facts `stats` trusts is not opened; its `Source` has
    its size and digest and no bytes (docs/internals.md "Inputs a resume does not read").
    `files`: the file is read and hashed, and its `Source` keeps no bytes either (read
    again through `files`). `keep_path` (a run's inputs with the stat cache): a file read
    and hashed here is kept by `stats` as its path, its `Source` without bytes too."""
    name = source_logical_name(base_dir, path)
    if defer and stats is not None:
        try:
            st = os.stat(path)
        except OSError as exc:
            raise SourceResolutionError(key, f"cannot read '{name}': {exc.strerror}") from None
        known = stats.lookup(path, st)
        if known is not None:
            stats.paths[name] = path
            return Source(name=name, data=b"", sha256=known, unread_size=st.st_size)
    try:
        with open(path, "rb") as fh:
            if stats is not None:
                # the facts of the descriptor read, and the clock before the read: a
                # write after it gives the file a later ctime
                # (docs/internals.md "Input stat cache")
                st = os.fstat(fh.fileno())
                before = stats.clock()
            data = fh.read()
    except OSError as exc:
        raise SourceResolutionError(key, f"cannot read '{name}': {exc.strerror}") from None
    if stats is not None:
        known = stats.lookup(path, st)
        if known is not None:
            return Source(name=name, data=data, sha256=known)
    try:
        check_utf8(data)
    except SourceIsBinary:
        raise SourceResolutionError(key, f"'{name}' is binary, not UTF-8 text") from None
    except SourceNotUtf8 as exc:
        raise SourceResolutionError(
            key, f"'{name}' is not valid UTF-8 (first bad byte at offset {exc.offset})"
        ) from None
    except SourceError as exc:
        raise SourceResolutionError(key, f"'{name}': {exc}") from None
    sha256 = digest(data)
    if stats is not None:
        stats.record(path, st, sha256, before)
    if files is not None:
        files.paths[name] = path
        return Source(name=name, data=b"", sha256=sha256, unread_size=len(data))
    if keep_path and stats is not None:  # a run's input the stat cache did not vouch for
        stats.keep(name, path)
        return Source(name=name, data=b"", sha256=sha256, unread_size=len(data))
    return Source(name=name, data=data, sha256=sha256)


def load_sources(
    patterns: Iterable[str],
    *,
    base_dir: str,
    key: str,
    name_dir: str | None = None,
    stats: InputStats | None = None,
    files: SourceFiles | None = None,
) -> list[Source]:
    """Sources ordered by logical name (UTF-8 byte order), as lanes and corpora require.

    Patterns are expanded against `base_dir`; names are relative to `name_dir` (the
    pipeline file's directory, docs/configuration.md "Paths"), so `--input` from any working
    directory names a document the same way and its checkpoints are found again. With
    `stats`, an unchanged file's recorded digest is used (docs/configuration.md
    `input_check`).
    """
    base = os.path.realpath(base_dir)
    names_base = os.path.realpath(name_dir) if name_dir is not None else base
    paths = expand_patterns(patterns, base_dir=base, key=key)
    if stats is not None:
        stats.prefetch(paths)
    # inputs only: a reference's text is every stage's context
    defer = stats is not None and stats.defer_reads and key != "references"
    keep = None if key == "references" else files
    # a run with the stat cache keeps no input's bytes either, trusted or read here (issue
    # 29: a first `stat` run, or one after many edits, held every input it read)
    by_path = stats is not None and stats.by_path and key != "references"
    sources = [
        read_text_file(
            p,
            base_dir=names_base,
            key=key,
            stats=stats,
            defer=defer,
            files=keep,
            keep_path=by_path,
        )
        for p in paths
    ]
    sources.sort(key=lambda s: s.name.encode("utf-8"))
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise SourceResolutionError(key, "two inputs have the same logical name")
    return sources
