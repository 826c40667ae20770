"""Validation of logical output names (docs/internals.md "Logical output names").

A module names its outputs with logical names; the CLI turns them into files beneath the
run directory. They are checked here, before any directory is allocated, so a bad name
fails the run without touching the disk. Pure: no file system access.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from runjournal.domain.lazy_pattern import LazyPattern

__all__ = [
    "MAX_COMPONENTS",
    "MAX_COMPONENT_BYTES",
    "MAX_NAME_BYTES",
    "RESERVED_NAMES",
    "LogicalNameError",
    "NameRefusal",
    "check_logical_names",
    "find_name_conflicts",
    "validate_logical_name",
]

MAX_COMPONENTS = 8
MAX_COMPONENT_BYTES = 255
MAX_NAME_BYTES = 1024

# Names the CLI itself writes at the top of the run directory.
RESERVED_NAMES: frozenset[str] = frozenset(
    {
        "manifest.json",
        "report.json",
        "report.html",
        "failure.json",
        "error.log",
        "chunk-map.json",
        "chunk-map.index.json",
    }
)

_COMPONENT = LazyPattern(r"[A-Za-z0-9._-]+")
_CONTROL = LazyPattern(r"[\x00-\x1f\x7f-\x9f]")


class NameRefusal(enum.Enum):
    """Why a logical name was refused; the value is the one-line explanation."""

    EMPTY = "is empty"
    NUL = "contains a NUL character"
    CONTROL_CHARACTER = "contains a control character"
    NOT_UTF8 = "is not valid UTF-8"
    BACKSLASH = "contains a backslash"
    ABSOLUTE = "is absolute"
    BAD_CHARACTER = "contains a character outside [A-Za-z0-9._-]"
    EMPTY_COMPONENT = "has an empty path component"
    DOT_COMPONENT = "has a '.' or '..' component"
    LEADING_DOT = "has a component starting with '.'"
    TOO_MANY_COMPONENTS = f"has more than {MAX_COMPONENTS} components"
    COMPONENT_TOO_LONG = f"has a component longer than {MAX_COMPONENT_BYTES} bytes"
    TOO_LONG = f"is longer than {MAX_NAME_BYTES} bytes"
    RESERVED = "is reserved for files the CLI writes"
    DUPLICATE = "is given more than once"
    CASE_COLLISION = "collides case-insensitively with another output name"
    PATH_CLASH = "is both a file and a directory of another output name"


class LogicalNameError(ValueError):
    """A logical output name that cannot be written; str() is one line."""

    def __init__(self, name: str, refusal: NameRefusal) -> None:
        super().__init__(name, refusal)
        self.name = name
        self.refusal = refusal

    def __str__(self) -> str:
        return f"logical output name {_shown(self.name)} refused: {self.refusal.value}"


def _shown(name: object, limit: int = 120) -> str:
    """repr() escapes control, bidi and non-printable characters; bound the length."""
    text = repr(name)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _refusal(name: str, *, allow_reserved: bool) -> NameRefusal | None:
    """Return the first rule `name` breaks, or None; cheap checks come first."""
    if not name:
        return NameRefusal.EMPTY
    if len(name) > MAX_NAME_BYTES:
        return NameRefusal.TOO_LONG
    if "\x00" in name:
        return NameRefusal.NUL
    if _CONTROL.search(name):
        return NameRefusal.CONTROL_CHARACTER
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        return NameRefusal.NOT_UTF8
    if len(encoded) > MAX_NAME_BYTES:
        return NameRefusal.TOO_LONG
    if "\\" in name:
        return NameRefusal.BACKSLASH
    if name.startswith("/"):
        return NameRefusal.ABSOLUTE
    parts = name.split("/")
    if len(parts) > MAX_COMPONENTS:
        return NameRefusal.TOO_MANY_COMPONENTS
    for part in parts:
        refusal = _component_refusal(part)
        if refusal is not None:
            return refusal
    if not allow_reserved and parts[0].lower() in RESERVED_NAMES:
        # A directory named like a reserved file would block the CLI's own write too.
        return NameRefusal.RESERVED
    return None


def _component_refusal(part: str) -> NameRefusal | None:
    if not part:
        return NameRefusal.EMPTY_COMPONENT
    if part in (".", ".."):
        return NameRefusal.DOT_COMPONENT
    if not _COMPONENT.fullmatch(part):
        return NameRefusal.BAD_CHARACTER
    if part.startswith("."):
        return NameRefusal.LEADING_DOT
    if len(part) > MAX_COMPONENT_BYTES:  # ASCII only by now: chars == bytes
        return NameRefusal.COMPONENT_TOO_LONG
    return None


def validate_logical_name(name: str, *, allow_reserved: bool = False) -> str:
    """Return `name` unchanged if it is a valid logical name, else raise LogicalNameError.

    `allow_reserved=True` is for the CLI's own files (manifest.json, ...).
    """
    if not isinstance(name, str):
        raise TypeError(f"logical name must be str, not {type(name).__name__}")
    refusal = _refusal(name, allow_reserved=allow_reserved)
    if refusal is not None:
        raise LogicalNameError(name, refusal)
    return name


def find_name_conflicts(names: Iterable[str]) -> list[tuple[str, NameRefusal]]:
    """Report names that cannot coexist in one run directory, in input order.

    Comparison is case-insensitive (the output root may live on such a file system):
    an exact repeat is DUPLICATE, a repeat up to case is CASE_COLLISION, and a name that
    is a directory prefix of another (``a`` and ``a/b``) is PATH_CLASH. The later name of
    each pair is reported. Names are not validated here.
    """
    exact: set[str] = set()
    files: set[str] = set()
    dirs: set[str] = set()
    conflicts: list[tuple[str, NameRefusal]] = []
    for name in names:
        key = name.casefold()
        prefixes = _dir_prefixes(key)
        if name in exact:
            conflicts.append((name, NameRefusal.DUPLICATE))
            continue
        exact.add(name)
        if key in files:
            conflicts.append((name, NameRefusal.CASE_COLLISION))
        elif key in dirs or any(prefix in files for prefix in prefixes):
            conflicts.append((name, NameRefusal.PATH_CLASH))
        else:
            files.add(key)
            dirs.update(prefixes)
    return conflicts


def _dir_prefixes(key: str) -> list[str]:
    parts = key.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def refused_names(
    names: Iterable[str], *, reserved_ok: Iterable[str] = ()
) -> list[tuple[str, NameRefusal]]:
    """Every refusal among `names`: each invalid name, then conflicts among the valid ones.

    `reserved_ok` lists reserved names the caller itself writes (e.g. the chunk map), which
    are accepted where they appear; every other reserved name is refused.
    """
    allowed = set(reserved_ok)
    out: list[tuple[str, NameRefusal]] = []
    valid: list[str] = []
    for name in names:
        refusal = _refusal(name, allow_reserved=name in allowed)
        if refusal is None:
            valid.append(name)
        else:
            out.append((name, refusal))
    return out + find_name_conflicts(valid)


def check_logical_names(names: Iterable[str], *, allow_reserved: bool = False) -> list[str]:
    """Validate every name and their coexistence; raise LogicalNameError on the first problem."""
    names = list(names)
    problems = refused_names(names, reserved_ok=RESERVED_NAMES if allow_reserved else ())
    if problems:
        name, refusal = problems[0]
        raise LogicalNameError(name, refusal)
    return names
