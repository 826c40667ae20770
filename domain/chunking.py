"""The pure chunk planner: split one UTF-8 source into byte spans
(docs/internals.md "Chunk planner and name rules").

Plans are computed on the decoded text (so limits count code points) and returned as
byte offsets into the source. Work is linear and mostly in C: each chunk's end is found by
one backwards regex (or ``rfind``) scan of its window, and byte offsets come from encoding
each chunk once. A plan loaded from a cache is checked by
``validate_plan`` before it is accepted. See docs/internals.md "Planning rules" for the exact rules.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import msgspec
from runjournal.domain.lazy_pattern import LazyPattern

# Bump whenever plan_chunks would split any input differently.
PLANNER_FINGERPRINT = "runjournal.chunking/1"

MAX_CHARS_LIMIT = 10_000_000

# Whitespace is exactly the set Python's str.isspace() accepts, spelled out so the
# planner does not depend on the running interpreter's Unicode database.
_HSPACE = r"\t\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_SPACE = _HSPACE + r"\n"

# A non-blank line followed by the start of a blank line: its end is a paragraph boundary.
# Possessive quantifiers keep every attempt linear in the line length.
_PARAGRAPH_END = LazyPattern(
    rf"(?m)^(?=[{_HSPACE}]*+[^{_HSPACE}\n])[^\n]*+\n(?=[{_HSPACE}]*+\n|[{_HSPACE}]++\Z)"
)
# Greedy and anchored at the window start: ends at the last paragraph boundary before endpos
# (the lookahead accepts a blank line cut off by endpos; see _last_paragraph_end).
_LAST_PARAGRAPH_END = LazyPattern(
    rf"(?s).*[^{_HSPACE}\n][{_HSPACE}]*+\n(?=[{_HSPACE}]*+\n|[{_HSPACE}]*+\Z)"
)
_BLANK_LINE = LazyPattern(rf"[{_HSPACE}]*+\n|[{_HSPACE}]++\Z")
# Matches up to and including the last whitespace in [pos, endpos) that follows some
# non-whitespace, so a cut never leaves a piece made only of leading whitespace.
_UP_TO_LAST_SPACE = LazyPattern(rf"(?s)[{_SPACE}]*+[^{_SPACE}].*[{_SPACE}]")

_CONTINUATION_BYTES = bytes(range(0x80, 0xC0))


class ChunkStrategy(enum.StrEnum):
    PARAGRAPHS = "paragraphs"
    LINES = "lines"
    FIXED = "fixed"


class ChunkingError(Exception):
    """Base of the planner's own errors."""


class ChunkingSettingsError(ChunkingError, ValueError):
    """Settings outside the supported range (a ValueError so msgspec decoding reports it)."""


class PlanDefect(enum.StrEnum):
    NOT_ORDERED = "not_ordered"
    GAP_OR_OVERLAP = "gap_or_overlap"
    NOT_COVERING = "not_covering"
    EMPTY_CHUNK = "empty_chunk"
    NOT_UTF8_BOUNDARY = "not_utf8_boundary"
    TOO_LARGE = "too_large"
    OUT_OF_BOUNDS = "out_of_bounds"


class PlanInvalid(ChunkingError):
    """A plan that must not be accepted; ``index`` is the offending span (None: whole plan)."""

    def __init__(self, reason: PlanDefect, index: int | None = None) -> None:
        self.reason = reason
        self.index = index
        where = "plan" if index is None else f"span {index}"
        super().__init__(f"invalid chunk plan: {reason.value} at {where}")


class SourceError(Exception):
    """A source that cannot be chunked; ``offset`` is the first offending byte."""

    def __init__(self, offset: int, message: str) -> None:
        self.offset = offset
        super().__init__(message)


class SourceNotUtf8(SourceError):
    def __init__(self, offset: int) -> None:
        super().__init__(offset, f"not valid UTF-8 (first bad byte at offset {offset})")


class SourceIsBinary(SourceError):
    def __init__(self, offset: int) -> None:
        super().__init__(offset, f"binary content (NUL byte at offset {offset})")


class ChunkingSettings(msgspec.Struct, frozen=True):
    """Part of the chunk-plan key and of every step's config digest."""

    strategy: ChunkStrategy = ChunkStrategy.PARAGRAPHS
    max_chars: int = 2000

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        if not isinstance(self.strategy, ChunkStrategy):
            raise ChunkingSettingsError(f"unknown chunking strategy {self.strategy!r}")
        size = self.max_chars
        if isinstance(size, bool) or not isinstance(size, int):
            raise ChunkingSettingsError("max_chars must be an integer")
        if not 1 <= size <= MAX_CHARS_LIMIT:
            raise ChunkingSettingsError(f"max_chars must be between 1 and {MAX_CHARS_LIMIT}")


class Span(msgspec.Struct, frozen=True, array_like=True):
    """A chunk as [start, end) BYTE offsets into the UTF-8 source."""

    start: int
    end: int


def check_utf8(data: bytes) -> None:
    """Refuse binary (any NUL byte) first, then invalid UTF-8, naming the first bad offset."""
    nul = data.find(b"\x00")
    if nul != -1:
        raise SourceIsBinary(nul)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceNotUtf8(exc.start) from None


def plan_chunks(data: bytes, settings: ChunkingSettings) -> list[Span]:
    """Split UTF-8 ``data`` into contiguous non-empty spans of at most max_chars code points."""
    settings.validate()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceNotUtf8(exc.start) from None
    size = settings.max_chars
    match settings.strategy:
        case ChunkStrategy.PARAGRAPHS:
            pieces = _pack_paragraphs(text, size)
        case ChunkStrategy.LINES:
            pieces = _pack_lines(text, size)
        case ChunkStrategy.FIXED:
            n = len(text)
            pieces = [(i, min(i + size, n)) for i in range(0, n, size)]
    return _to_byte_spans(text, len(data), pieces)


def validate_plan(data: bytes, spans: Sequence[Span], max_chars: int) -> None:
    """Accept only ordered, contiguous, covering, non-empty spans on UTF-8 boundaries."""
    if isinstance(max_chars, bool) or not 1 <= max_chars <= MAX_CHARS_LIMIT:
        raise ChunkingSettingsError(f"max_chars must be between 1 and {MAX_CHARS_LIMIT}")
    n = len(data)
    prev_start, prev_end = -1, 0
    for index, span in enumerate(spans):
        start, end = span.start, span.end
        if not (0 <= start <= n and 0 <= end <= n):
            raise PlanInvalid(PlanDefect.OUT_OF_BOUNDS, index)
        if end < start or start < prev_start:
            raise PlanInvalid(PlanDefect.NOT_ORDERED, index)
        if start == end:
            raise PlanInvalid(PlanDefect.EMPTY_CHUNK, index)
        if index == 0 and start != 0:
            raise PlanInvalid(PlanDefect.NOT_COVERING, index)
        if start != prev_end:
            raise PlanInvalid(PlanDefect.GAP_OR_OVERLAP, index)
        if data[start] in _CONTINUATION_BYTES or (end < n and data[end] in _CONTINUATION_BYTES):
            raise PlanInvalid(PlanDefect.NOT_UTF8_BOUNDARY, index)
        # Code points never outnumber bytes, so only long spans need counting.
        if end - start > max_chars:
            code_points = len(data[start:end].translate(None, _CONTINUATION_BYTES))
            if code_points > max_chars:
                raise PlanInvalid(PlanDefect.TOO_LARGE, index)
        prev_start, prev_end = start, end
    if prev_end != n:
        raise PlanInvalid(PlanDefect.NOT_COVERING, None)


def _pack_paragraphs(text: str, size: int) -> list[tuple[int, int]]:
    """Greedy paragraph packing; each chunk ends at the last paragraph end inside its window."""
    pieces: list[tuple[int, int]] = []
    start, n = 0, len(text)
    while start < n:
        limit = start + size
        if limit >= n:
            pieces.append((start, n))
            break
        end = _last_paragraph_end(text, start, limit)
        if end is not None:
            pieces.append((start, end))
            start = end
        else:
            # start is a paragraph boundary, so the first match after it ends this unit.
            found = _PARAGRAPH_END.search(text, start)
            stop = n if found is None else found.end()
            _cut_oversized(text, start, stop, size, pieces)
            start = stop
    return pieces


def _last_paragraph_end(text: str, start: int, limit: int) -> int | None:
    """The last paragraph boundary in (start, limit], found by one backwards regex scan.

    The lookahead cannot see past ``limit``, so a candidate whose blank line reaches the
    window's end is re-checked on the whole text; the next earlier candidate is exact
    because the text at its window's end is a newline.
    """
    found = _LAST_PARAGRAPH_END.match(text, start, limit)
    if found is None:
        return None
    end = found.end()
    if _BLANK_LINE.match(text, end):
        return end
    found = _LAST_PARAGRAPH_END.match(text, start, end - 1)
    return None if found is None else found.end()


def _pack_lines(text: str, size: int) -> list[tuple[int, int]]:
    """Greedy line packing; the last newline inside each window ends the chunk."""
    pieces: list[tuple[int, int]] = []
    start, n = 0, len(text)
    while start < n:
        limit = start + size
        if limit >= n:
            pieces.append((start, n))
            break
        newline = text.rfind("\n", start, limit)
        if newline != -1:
            pieces.append((start, newline + 1))
            start = newline + 1
        else:
            stop = text.find("\n", limit)
            stop = n if stop == -1 else stop + 1
            _cut_oversized(text, start, stop, size, pieces)
            start = stop
    return pieces


def _cut_oversized(
    text: str, start: int, stop: int, size: int, pieces: list[tuple[int, int]]
) -> None:
    """Cut [start, stop) after the last whitespace before each limit, else at the limit.

    Whitespace in a piece's leading run does not count: "\\n\\nword..." is cut at the
    limit rather than into a piece holding only the blank lines.
    """
    while stop - start > size:
        limit = start + size
        cut = limit
        found = _UP_TO_LAST_SPACE.match(text, start, limit)
        if found:
            cut = found.end()
            if text[cut - 1] == "\r" and text[cut : cut + 1] == "\n":
                # Do not split a CRLF pair if an earlier whitespace exists.
                earlier = _UP_TO_LAST_SPACE.match(text, start, cut - 1)
                if earlier:
                    cut = earlier.end()
        pieces.append((start, cut))
        start = cut
    pieces.append((start, stop))


def _to_byte_spans(text: str, byte_len: int, pieces: list[tuple[int, int]]) -> list[Span]:
    if len(text) == byte_len:  # pure ASCII: code points are bytes
        return [Span(a, b) for a, b in pieces]
    spans: list[Span] = []
    pos = 0
    for a, b in pieces:
        end = pos + len(text[a:b].encode("utf-8"))
        spans.append(Span(pos, end))
        pos = end
    return spans
