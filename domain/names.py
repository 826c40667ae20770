"""Name rules (SEMANTICS §2): pipeline names, step ids, source logical names, lane ids, run ids.

Pure string functions: callers resolve paths and supply the clock and randomness, so every
name here is a deterministic function of its inputs.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from pathlib import PurePosixPath

PIPELINE_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
STEP_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
RUN_ID_RE = re.compile(r"[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}")
_TIMESTAMP_RE = re.compile(r"[0-9]{8}T[0-9]{6}Z")
_HEX8_RE = re.compile(r"[0-9a-f]{8}")

CORPUS_LANE = "corpus"

# The readable part of a safe lane id is cut here so that, with the "-" and 8-hex suffix,
# the component stays far below the 255-byte limit of common filesystems.
SAFE_LANE_READABLE_MAX = 200

_UNSAFE_LANE_CHAR = re.compile(r"[^A-Za-z0-9._-]")


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


def _hash8(text: str) -> str:
    # surrogateescape keeps undecodable file-name bytes (os.fsdecode) hashable as themselves.
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:8]


def _resolved(path: PurePosixPath | str, what: str) -> PurePosixPath:
    p = PurePosixPath(path)
    if not p.is_absolute() or ".." in p.parts:
        raise InvalidSourcePath(f"{what} must be an absolute resolved path: {str(path)!r}")
    return p


def source_logical_name(pipeline_dir: PurePosixPath | str, source_abs: str) -> str:
    """Path relative to the pipeline directory, or ``<file name>~<8 hex>`` outside it.

    The hash is over the normalized absolute path, so two outside files that share a
    file name still get distinct logical names.
    """
    base = _resolved(pipeline_dir, "pipeline directory")
    source = _resolved(source_abs, "source path")
    if source.name == "" or source == base:
        raise InvalidSourcePath(f"source path names no file: {source_abs!r}")
    if source.is_relative_to(base):
        return source.relative_to(base).as_posix()
    return f"{source.name}~{_hash8(str(source))}"


def safe_lane_id(lane_id: str) -> str:
    """A lane id as one portable path component of ``[A-Za-z0-9._-]``.

    ``/`` becomes ``__``; any other character outside the set, and a leading ``.``,
    becomes ``_``. When anything changed (or the readable part had to be cut to
    SAFE_LANE_READABLE_MAX characters, or the id is empty, which reads as ``_``), ``-`` and 8 hex of
    sha256(lane id) are appended so distinct ids stay distinct.
    """
    readable = _UNSAFE_LANE_CHAR.sub(lambda m: "__" if m.group() == "/" else "_", lane_id)
    if readable.startswith("."):
        readable = "_" + readable[1:]
    if len(readable) > SAFE_LANE_READABLE_MAX:
        readable = readable[:SAFE_LANE_READABLE_MAX]
    if readable == lane_id and lane_id:
        return lane_id
    if not readable:
        readable = "_"
    return f"{readable}-{_hash8(lane_id)}"


def compact_utc_timestamp(moment: datetime) -> str:
    """The run-id timestamp part (``20261130T150405Z``) of an aware datetime."""
    if moment.tzinfo is None:
        raise InvalidRunIdPart("run-id timestamp needs a timezone-aware datetime")
    return moment.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def make_run_id(utc_timestamp_compact: str, random_hex8: str) -> str:
    """``20261130T150405Z-1a2b3c4d``: sortable by start time, unique by the random part."""
    if not _TIMESTAMP_RE.fullmatch(utc_timestamp_compact):
        raise InvalidRunIdPart(f"bad run-id timestamp {utc_timestamp_compact!r}")
    if not _HEX8_RE.fullmatch(random_hex8):
        raise InvalidRunIdPart(f"bad run-id random part {random_hex8!r}")
    return f"{utc_timestamp_compact}-{random_hex8}"
