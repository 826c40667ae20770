"""`builtin.headings`: the markdown outline of each document.

ATX (`## Title`) and setext (`Title` over `===`/`---`) headings outside fenced code.
Like every built-in, extract reports offsets relative to its chunk and merge places
them in the source, so a reused chunk never carries a stale offset.
"""

from __future__ import annotations

import re

import msgspec
from runjournal.adapters.builtin_modules.text import (
    byte_len,
    clean_inline,
    unknown_param_warnings,
)
from runjournal.domain.modules import Chunk, Module, Normalized, StageContext

__all__ = ["Heading", "HeadingHit", "HeadingsChunk", "HeadingsModule", "find_headings"]

_NAME = "builtin.headings"


class HeadingHit(msgspec.Struct, frozen=True):
    """A heading; `offset` is the byte offset of its line relative to the chunk."""

    level: int
    text: str
    offset: int


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


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_BLOCK_START = re.compile(r"^ {0,3}(?:[-*+>]|\d{1,9}[.)]|#|\|)")


def find_headings(text: str) -> list[HeadingHit]:
    """Headings of a markdown text with byte offsets relative to it."""
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


class HeadingsModule(Module):
    """The outline (level, text, byte offset) of each document; no output files."""

    name = _NAME
    fingerprint = "builtin.headings/1"
    artifact_kind = "outline"
    schema = "runjournal.builtin.headings/v1"
    media_type = "application/json"
    chunk_type = HeadingsChunk
    merged_type = list[Heading]
    artifact_type = list[Heading]
    override_keys = ()  # reads no --set key

    def extract(self, chunk: Chunk, ctx: StageContext) -> HeadingsChunk:
        return HeadingsChunk(
            source=chunk.source, size=byte_len(chunk.text), headings=find_headings(chunk.text)
        )

    def merge(self, parts: list[HeadingsChunk], ctx: StageContext) -> list[Heading]:
        offsets: dict[str, int] = {}
        merged: list[Heading] = []
        for part in parts:
            base = offsets.get(part.source, 0)
            merged.extend(
                Heading(part.source, h.level, h.text, base + h.offset) for h in part.headings
            )
            offsets[part.source] = base + part.size
        return merged

    def normalize(self, merged: list[Heading], ctx: StageContext) -> Normalized:
        return Normalized(merged, unknown_param_warnings(ctx.params, (), module=_NAME))
