"""Example plugin: acronyms and their expansions, as in "write-ahead log (WAL)".

Loaded by path from the pipeline (`module = "plugins/acronyms.py:Acronyms"`). It shows
the whole module contract in one file: an explicit fingerprint, codec types, three
pure stages, and no filesystem access.
"""

from __future__ import annotations

import re

import msgspec
from runjournal.domain.modules import Chunk, Module, Normalized, StageContext

_ACRONYM = re.compile(r"\b[A-Z]{2,6}\b")
_DEFINED = re.compile(r"\(([A-Z]{2,6})\)")
_WORD = re.compile(r"[A-Za-z][\w-]*")
_CONNECTORS = frozenset({"a", "an", "and", "for", "in", "of", "on", "the", "to"})


class AcronymsChunk(msgspec.Struct, frozen=True):
    """Acronym mentions and the expansions first written in this chunk."""

    counts: dict[str, int]
    expansions: dict[str, str]


class Acronym(msgspec.Struct, frozen=True):
    acronym: str
    expansion: str | None
    count: int


def _initials(words: list[str]) -> str:
    return "".join(part[0] for word in words for part in word.split("-") if part).upper()


def expansion_before(text: str, acronym: str) -> str | None:
    """The shortest run of words ending `text` whose initials spell `acronym`."""
    words = _WORD.findall(text)[-(len(acronym) + 4) :]
    for n in range(1, len(words) + 1):
        candidate = words[-n:]
        if candidate[0].casefold() in _CONNECTORS:
            continue
        content = [w for w in candidate if w.casefold() not in _CONNECTORS]
        if acronym in (_initials(candidate), _initials(content)):
            return " ".join(candidate)
    return None


class Acronyms(Module):
    """Acronyms (2-6 capitals) of a document with "Full Name (FN)" expansions."""

    name = "example.acronyms"
    fingerprint = "example.acronyms/1"
    artifact_kind = "acronyms"
    schema = "example.acronyms/v1"
    media_type = "application/json"
    chunk_type = AcronymsChunk
    merged_type = list[Acronym]
    artifact_type = list[Acronym]
    override_keys = ()  # reads no --set key

    def extract(self, chunk: Chunk, ctx: StageContext) -> AcronymsChunk:
        counts: dict[str, int] = {}
        for match in _ACRONYM.finditer(chunk.text):
            counts[match.group()] = counts.get(match.group(), 0) + 1
        expansions: dict[str, str] = {}
        for match in _DEFINED.finditer(chunk.text):
            acronym = match.group(1)
            found = expansion_before(chunk.text[: match.start()], acronym)
            if found is not None and acronym not in expansions:
                expansions[acronym] = found
        return AcronymsChunk(counts=counts, expansions=expansions)

    def merge(self, parts: list[AcronymsChunk], ctx: StageContext) -> list[Acronym]:
        counts: dict[str, int] = {}
        expansions: dict[str, str] = {}
        for part in parts:
            for acronym, count in part.counts.items():
                counts[acronym] = counts.get(acronym, 0) + count
            for acronym, expansion in part.expansions.items():
                expansions.setdefault(acronym, expansion)
        return [Acronym(a, expansions.get(a), counts[a]) for a in sorted(counts)]

    def normalize(self, merged: list[Acronym], ctx: StageContext) -> Normalized:
        expanded = [a for a in merged if a.expansion is not None]
        return Normalized(expanded)
