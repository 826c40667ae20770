"""Name rules (docs/operations.md "Names"): pipeline names, step ids, source logical names, lane
ids, run ids.

Pure string functions: callers resolve paths and supply the clock and randomness, so every
name here is a deterministic function of its inputs.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from runjournal.domain.lazy_pattern import LazyPattern

if TYPE_CHECKING:
    from runjournal.domain.events import Timestamp

PIPELINE_NAME_RE = LazyPattern(r"[A-Za-z0-9_-]{1,64}")
STEP_ID_RE = LazyPattern(r"[A-Za-z0-9_-]{1,64}")
RUN_ID_RE = LazyPattern(r"[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}")
_TIMESTAMP_RE = LazyPattern(r"[0-9]{8}T[0-9]{6}Z")
_HEX8_RE = LazyPattern(r"[0-9a-f]{8}")

CORPUS_LANE = "corpus"

# The readable part of a safe lane id is cut here so that, with the "-" and 8-hex suffix,
# the component stays far below the 255-byte limit of common filesystems.
SAFE_LANE_READABLE_MAX = 200

_UNSAFE_LANE_CHAR = LazyPattern(r"[^A-Za-z0-9._-]")
# Every escaped safe lane id ends so; a lane id that already does is escaped too.
_ESCAPED_SUFFIX = LazyPattern(r"-[0-9a-f]{8}\Z")


class NameRuleError(ValueError):
    """An input that the name rules cannot turn into a name."""


class InvalidSourcePath(NameRuleError):
    """A source or pipeline directory path that is not absolute, resolved and POSIX."""


class InvalidRunIdPart(NameRuleError):
    """A timestamp or random part that does not have the run-id shape."""


def is_valid_pipeline_name(s: object) -> bool:
    return isinstance(s, str) and PIPELINE_NAME_RE.fullmatch(s) is not None


def is_valid_step_id(s: object) -> bool:
    return isinstance(s, str) and STEP_ID_RE.fullmatch(s) is not None


def is_valid_run_id(s: object) -> bool:
    return isinstance(s, str) and RUN_ID_RE.fullmatch(s) is not None


def recorded_run_parent(run_id: str, run_dir: str) -> str | None:
    """The directory holding a run's directory, as its `RunAllocated` recorded it.

    Only a record of the form `<absolute, normalized dir>/<run id>` for a valid run id
    names one; anything else (a relative or `..` path, another last name) is None, so a
    command never acts on a path the record does not pin down (docs/operations.md
    "Where a run lives").
    """
    if not is_valid_run_id(run_id) or not isinstance(run_dir, str):
        return None
    parent, sep, last = run_dir.rpartition("/")
    if not sep or last != run_id or not parent.startswith("/"):
        return None
    if any(part in ("", ".", "..") for part in parent.split("/")[1:]):
        return None
    return parent


def _hash8(text: str) -> str:
    # surrogateescape keeps undecodable file-name bytes (os.fsdecode) hashable as themselves.
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:8]


def _resolved(path: object, what: str) -> tuple[str, ...]:
    """An absolute POSIX path as (root, *components), normalized as `PurePosixPath` does.

    Empty and `.` components are dropped; the root is `/`, or `//` when the path starts
    with exactly two slashes (POSIX leaves that root implementation-defined). A string
    operation only: nothing is looked up on disk.
    """
    text = str(path)
    if not text.startswith("/"):
        raise InvalidSourcePath(f"{what} must be an absolute resolved path: {text!r}")
    root = "//" if text.startswith("//") and not text.startswith("///") else "/"
    parts = tuple(part for part in text.split("/") if part not in ("", "."))
    if ".." in parts:
        raise InvalidSourcePath(f"{what} must be an absolute resolved path: {text!r}")
    return (root, *parts)


def _joined(parts: tuple[str, ...]) -> str:
    return parts[0] + "/".join(parts[1:])


def source_logical_name(pipeline_dir: object, source_abs: str) -> str:
    """Path relative to the pipeline directory, or ``<file name>~<8 hex>`` outside it.

    `pipeline_dir` is a string or a path object whose `str()` is its POSIX path. The hash
    is over the normalized absolute path, so two outside files that share a file name
    still get distinct logical names.
    """
    base = _resolved(pipeline_dir, "pipeline directory")
    source = _resolved(source_abs, "source path")
    if len(source) == 1 or source == base:
        raise InvalidSourcePath(f"source path names no file: {source_abs!r}")
    if source[: len(base)] == base:
        return "/".join(source[len(base) :])
    return f"{source[-1]}~{_hash8(_joined(source))}"


def safe_lane_id(lane_id: str) -> str:
    """A lane id as one portable path component of ``[A-Za-z0-9._-]``, distinct per lane id.

    ``/`` becomes ``__``; any other character outside the set, and a leading ``.``,
    becomes ``_``. When anything changed (or the readable part had to be cut to
    SAFE_LANE_READABLE_MAX characters, or the id is empty, which reads as ``_``), ``-`` and 8 hex of
    sha256(lane id) are appended so distinct ids stay distinct.

    An id kept as it is never ends in ``-`` and 8 hex, so it cannot equal an escaped one:
    an id that already ends so (a file literally named ``docs__a.md-5231f8a1``) is
    escaped too and gets its own suffix (docs/operations.md "Names").
    """
    readable = _UNSAFE_LANE_CHAR.sub(lambda m: "__" if m.group() == "/" else "_", lane_id)
    if readable.startswith("."):
        readable = "_" + readable[1:]
    if len(readable) > SAFE_LANE_READABLE_MAX:
        readable = readable[:SAFE_LANE_READABLE_MAX]
    if readable == lane_id and lane_id and not _ESCAPED_SUFFIX.search(lane_id):
        return lane_id
    if not readable:
        readable = "_"
    return f"{readable}-{_hash8(lane_id)}"


def compact_utc_timestamp(moment: Timestamp) -> str:
    """The run-id timestamp part (``20261130T150405Z``) of an aware datetime."""
    offset = moment.utcoffset()
    if offset is None:
        raise InvalidRunIdPart("run-id timestamp needs a timezone-aware datetime")
    return (moment - offset).strftime("%Y%m%dT%H%M%SZ")  # the same instant in UTC


def make_run_id(utc_timestamp_compact: str, random_hex8: str) -> str:
    """``20261130T150405Z-1a2b3c4d``: sortable by start time, unique by the random part."""
    if not _TIMESTAMP_RE.fullmatch(utc_timestamp_compact):
        raise InvalidRunIdPart(f"bad run-id timestamp {utc_timestamp_compact!r}")
    if not _HEX8_RE.fullmatch(random_hex8):
        raise InvalidRunIdPart(f"bad run-id random part {random_hex8!r}")
    return f"{utc_timestamp_compact}-{random_hex8}"
