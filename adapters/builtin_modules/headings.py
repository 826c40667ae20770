"""`builtin.headings`: the outline of each markdown or reStructuredText document.

Markdown: ATX (`## Title`) and setext (`Title` over `===`/`---`) headings outside
fenced code. reST: section titles with an underline (and maybe an overline); their
levels follow the order in which adornment styles first appear in the document, so
extract reports the style and merge, which sees the whole document, gives the level.
Extract reports offsets relative to its chunk and merge places them in the source, so
a reused chunk never carries a stale offset. An outline is about positions: unlike the
other built-ins' artifacts, it changes when an edit moves a heading (docs/modules.md).
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec
from runjournal.adapters.builtin_modules.markup import (
    Syntax,
    inline_markdown,
    rest_heading_lines,
    syntax_of,
)
from runjournal.adapters.builtin_modules.text import (
    byte_len,
    clean_inline,
    unknown_param_warnings,
)
from runjournal.domain.lazy_pattern import LazyPattern
from runjournal.domain.modules import Chunk, Module, Normalized, StageContext

__all__ = ["Heading", "HeadingHit", "HeadingsChunk", "HeadingsModule", "find_headings"]

_NAME = "builtin.headings"


class HeadingHit(msgspec.Struct, frozen=True):
    """A heading; `offset` is the byte offset of its line relative to the chunk.

    `level` is 0 for a reST title, whose level merge derives from its `style` (the
    adornment character, doubled when there is an overline).
    """

    level: int
    text: str
    offset: int
    style: str = ""


class HeadingsChunk(msgspec.Struct, frozen=True):
    source: str
    size: int
    headings: list[HeadingHit]


class Heading(msgspec.Struct, frozen=True):
    """A heading of a source: level 1-6, plain text, byte offset of its line."""

    source: str
    level: int
    text: str
    offset: int


_FENCE = LazyPattern(r"^ {0,3}(`{3,}|~{3,})")
_ATX = LazyPattern(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = LazyPattern(r"^ {0,3}(=+|-+)[ \t]*$")
_BLOCK_START = LazyPattern(r"^ {0,3}(?:[-*+>]|\d{1,9}[.)]|#|\|)")


def find_headings(text: str, syntax: Syntax = Syntax.MARKDOWN) -> list[HeadingHit]:
    """Headings of a text with byte offsets relative to it."""
    if syntax is Syntax.REST:
        return _rest_headings(text)
    hits: list[HeadingHit] = []
    fence: str | None = None
    offset = 0
    previous: tuple[str, int] | None = None  # a paragraph line that may become setext
    for line in text.splitlines(keepends=True):
        line_offset = offset
        offset += byte_len(line)
        body = line.rstrip("\r\n")
        fence_match = _FENCE.match(body)
        if fence is not None:
            if fence_match and fence_match.group(1)[0] == fence[0]:
                fence = None
            continue
        if fence_match:
            fence, previous = fence_match.group(1), None
            continue
        atx = _ATX.match(body)
        if atx:
            level = len(atx.group(1))
            hits.append(HeadingHit(level, clean_inline(atx.group(2) or ""), line_offset))
            previous = None
            continue
        setext = _SETEXT.match(body)
        if setext and previous is not None:
            level = 1 if setext.group(1)[0] == "=" else 2
            hits.append(HeadingHit(level, clean_inline(previous[0]), previous[1]))
            previous = None
            continue
        starts_paragraph = body.strip() and not _BLOCK_START.match(body)
        previous = (body, line_offset) if starts_paragraph and previous is None else None
    return hits


def _rest_headings(text: str) -> list[HeadingHit]:
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + byte_len(line))
    bare = [line.rstrip("\r\n") for line in lines]
    return [
        HeadingHit(0, clean_inline(inline_markdown(title, Syntax.REST)), offsets[i], style)
        for i, title, style in rest_heading_lines(bare)
    ]


class HeadingsModule(Module):
    """The outline (level, text, byte offset) of each document; no output files."""

    name = _NAME
    fingerprint = "builtin.headings/2"
    artifact_kind = "outline"
    schema = "runjournal.builtin.headings/v1"
    media_type = "application/json"
    chunk_type = HeadingsChunk
    merged_type = list[Heading]
    artifact_type = list[Heading]
    override_keys = ()  # reads no --set key
    llm_stages = ()  # never calls a model
    known_params = ()
    strict_params = True  # takes no params: any is an error before the run
    merge_streams = True  # merge reads its parts once, in order (docs/modules.md)

    def extract(self, chunk: Chunk, ctx: StageContext) -> HeadingsChunk:
        syntax = syntax_of(chunk.source, chunk.text)
        return HeadingsChunk(
            source=chunk.source,
            size=byte_len(chunk.text),
            headings=find_headings(chunk.text, syntax),
        )

    def merge(self, parts: Iterable[HeadingsChunk], ctx: StageContext) -> list[Heading]:
        offsets: dict[str, int] = {}
        styles: dict[str, list[str]] = {}  # reST adornment styles in order of appearance
        merged: list[Heading] = []
        for part in parts:
            base = offsets.get(part.source, 0)
            seen = styles.setdefault(part.source, [])
            for h in part.headings:
                level = h.level
                if level == 0:
                    if h.style not in seen:
                        seen.append(h.style)
                    level = min(seen.index(h.style) + 1, 6)
                merged.append(Heading(part.source, level, h.text, base + h.offset))
            offsets[part.source] = base + part.size
        return merged

    def normalize(self, merged: list[Heading], ctx: StageContext) -> Normalized:
        return Normalized(merged, unknown_param_warnings(ctx.params, (), module=_NAME))
