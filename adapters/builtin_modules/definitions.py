"""`builtin.definitions`: where a document defines a term found by a terms step.

A definition-list or glossary item (reST `term` + indented body, `.. glossary::`, MyST
`{glossary}` or `term` / `: definition`) defines its terms; a sentence with a `dfn`
defines that term; otherwise a sentence defines a term when the term is its subject in
one of a few English shapes ("X is a …", "X refers to …", "X means …", "X, also called
Y, …", "we call … X", "X: …"). A definition is located by its source and the section
(nearest heading) it is in, never by offsets: an edit that moves a definition without
changing it leaves the artifact byte-identical (docs/modules.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
from runjournal.adapters.builtin_modules.markup import BlockKind, blocks, split_sentences, syntax_of
from runjournal.adapters.builtin_modules.text import (
    BuiltinParamError,
    clean_inline,
    collapse_space,
    str_param,
    term_key,
    unknown_param_warnings,
)
from runjournal.domain.lazy_pattern import LazyPattern
from runjournal.domain.modules import Chunk, Module, Normalized, StageContext

__all__ = [
    "PATTERN_RANK",
    "Definition",
    "DefinitionHit",
    "DefinitionsChunk",
    "DefinitionsModule",
    "TermTexts",
    "consumed_step",
    "definition_keys",
    "field_of",
    "lane_terms",
    "pattern_rank",
    "require_step",
    "term_entries",
]

_NAME = "builtin.definitions"
_PARAMS = ("terms_step",)


class DefinitionHit(msgspec.Struct, frozen=True):
    """A definition in a chunk; `section` is the chunk's last heading before it, if any."""

    key: str
    term: str
    pattern: str
    section: str | None
    text: str
    markdown: str


class DefinitionsChunk(msgspec.Struct, frozen=True):
    """A chunk's hits and its last heading (what merge needs to name later sections)."""

    source: str
    last_section: str | None
    hits: list[DefinitionHit]


class Definition(msgspec.Struct, frozen=True):
    """A definition: its source and the section (nearest heading above it), if any."""

    key: str
    term: str
    pattern: str
    source: str
    section: str | None
    text: str
    markdown: str


class TermTexts(msgspec.Struct, frozen=True):
    """What the extract reads of one lane of the terms step: term key -> display text."""

    terms: dict[str, str]


# How much a definition is trusted: a glossary entry over a definition list over a
# `dfn` over an English sentence shape.
PATTERN_RANK = {"glossary": 0, "definition_list": 1, "dfn": 2}
_SENTENCE_RANK = len(PATTERN_RANK)


def pattern_rank(pattern: object) -> int:
    return PATTERN_RANK.get(pattern, _SENTENCE_RANK) if isinstance(pattern, str) else 99


def consumed_step(
    ctx: StageContext,
    param: str,
    preferred: str,
    *,
    module: str,
    exclude: tuple[str, ...] = (),
) -> str | None:
    """Which consumed step a param names: explicit, else `preferred`, else the only one.

    None when nothing fits; an explicit name that is not consumed is an error.
    """
    if param in ctx.params:
        step = str_param(ctx.params, param, preferred, module=module)
        if step not in ctx.consumed:
            raise BuiltinParamError(
                f"{module}: params.{param} names step {step!r}, which step "
                f"{ctx.step!r} does not consume"
            )
        return step
    candidates = [step for step in ctx.consumed if step not in exclude]
    if preferred in candidates:
        return preferred
    if len(candidates) == 1:
        return candidates[0]
    return None


def require_step(ctx: StageContext, param: str, preferred: str, *, module: str) -> str:
    step = consumed_step(ctx, param, preferred, module=module)
    if step is None:
        have = ", ".join(sorted(ctx.consumed)) or "none"
        raise BuiltinParamError(
            f"{module}: cannot tell which consumed step holds the {preferred} "
            f"(consumed: {have}); set params.{param}"
        )
    return step


def field_of(item: Any, name: str) -> Any:
    if isinstance(item, Mapping):
        return item.get(name)
    return getattr(item, name, None)


def term_entries(artifacts: Iterable[Any]) -> dict[str, str]:
    """key -> display text of terms in artifacts of `builtin.terms` or a look-alike.

    Accepts lists of Term structs, of mappings with `text` (and maybe `key`), or of
    plain strings, so a plugin can stand in for the terms step.
    """
    entries: dict[str, str] = {}
    for artifact in artifacts:
        if isinstance(artifact, TermTexts):  # the part an extract reads (`reads`)
            for key, text in artifact.terms.items():
                entries.setdefault(key, text)
            continue
        for item in artifact if isinstance(artifact, list) else []:
            text = item if isinstance(item, str) else field_of(item, "text")
            if not isinstance(text, str) or not text.strip():
                continue
            key = field_of(item, "key") if not isinstance(item, str) else None
            key = key if isinstance(key, str) and key else term_key(text)
            entries.setdefault(key, text)
    return entries


def lane_terms(ctx: StageContext, step: str) -> dict[str, str]:
    """Terms visible to this lane: its own lane of the step, else all lanes' terms."""
    lanes = ctx.consumed.get(step, {})
    if ctx.lane in lanes:
        return term_entries([lanes[ctx.lane]])
    return term_entries(lanes[lane] for lane in sorted(lanes))


_SUBJECT = r"(?P<subj>[^,;:()\[\]\u2014\u2013]{1,80}?)(?:\s*\([^)]*\))?"
_IS = LazyPattern(
    _SUBJECT + r"\s+(?:is|are)\s+(?:(?:also|simply|just|essentially|usually|often)\s+)?"
    r"(?:a|an|the|one|any|what|how|where|when|whatever)\b",
    re.I,
)
_REFERS = LazyPattern(
    _SUBJECT + r"\s+(?:refers?\s+to|means?|denotes?|(?:is|are)\s+defined\s+as|stands?\s+for)\b",
    re.I,
)
_ALSO = LazyPattern(
    r"(?P<subj>[^,;:()]{1,80}?)\s*[,(]\s*(?:also\s+(?:called|known\s+as)|a\.k\.a\.?|aka)\s+"
    r"(?P<alias>[^,;:()]{1,60}?)\s*[,)]",
    re.I,
)
_COLON = LazyPattern(_SUBJECT + r"\s*(?::|\u2014|\u2013|\s-\s)\s*(?P<rest>\S.*)$")
_CALL = LazyPattern(
    r"\b(?:we|they|people|you|one)\s+(?:call|name|term)\s+(?P<obj>[^.;:!?,]+)"
    r"|\b(?:is|are)\s+(?:called|named|termed|known\s+as)\s+(?P<obj2>[^.;:!?,]+)",
    re.I,
)


def _subject_key(subject: str, terms: Mapping[str, str]) -> str | None:
    key = term_key(subject)
    return key if key in terms else None


def _object_key(obj: str, terms: Mapping[str, str]) -> str | None:
    """The longest tail (up to four words) of a `we call …` object that is a term."""
    words = clean_inline(obj).split()
    for n in range(min(4, len(words)), 0, -1):
        key = term_key(" ".join(words[-n:]))
        if key in terms:
            return key
    return None


def definition_keys(sentence: str, terms: Mapping[str, str]) -> list[tuple[str, str]]:
    """(term key, pattern) pairs for every term `sentence` (plain text) defines."""
    if sentence.endswith("?"):
        return []
    found: dict[str, str] = {}

    def add(key: str | None, pattern: str) -> None:
        if key is not None and key not in found:
            found[key] = pattern

    also = _ALSO.match(sentence)
    if also:
        add(_subject_key(also.group("subj"), terms), "also_called")
        add(_subject_key(also.group("alias"), terms), "also_called")
    for regex, pattern in ((_IS, "is"), (_REFERS, "refers_to")):
        match = regex.match(sentence)
        if match:
            add(_subject_key(match.group("subj"), terms), pattern)
    colon = _COLON.match(sentence)
    if colon and len(colon.group("rest").split()) >= 3:
        add(_subject_key(colon.group("subj"), terms), "colon")
    for match in _CALL.finditer(sentence):
        add(_object_key(match.group("obj") or match.group("obj2"), terms), "called")
    return list(found.items())


def _sensible(definition: Definition) -> bool:
    return 5 <= len(definition.text.split()) <= 60


_DFN = LazyPattern(r"<dfn>(.+?)</dfn>", re.S)


def _hit(key: str, term: str, pattern: str, section: str | None, raw: str) -> DefinitionHit:
    return DefinitionHit(key, term, pattern, section, clean_inline(raw), collapse_space(raw))


def _chunk_hits(
    text: str, source: str, terms: Mapping[str, str]
) -> tuple[list[DefinitionHit], str | None]:
    """Definitions of `terms` in one chunk, and the chunk's last heading."""
    hits: list[DefinitionHit] = []
    section: str | None = None
    for block in blocks(text, syntax_of(source, text)):
        if block.kind is BlockKind.HEADING:
            section = clean_inline(block.text) or section
            continue
        if block.kind is BlockKind.DEFINITION and block.definition:
            pattern = "glossary" if block.glossary else "definition_list"
            for raw_term in block.terms:
                key = term_key(raw_term)
                if key in terms:
                    hits.append(_hit(key, terms[key], pattern, section, block.definition))
        for raw in split_sentences(block.text):
            for match in _DFN.finditer(raw):
                key = term_key(match.group(1))
                if key in terms:
                    hits.append(_hit(key, terms[key], "dfn", section, raw))
            for key, pattern in definition_keys(clean_inline(raw), terms):
                hits.append(_hit(key, terms[key], pattern, section, raw))
    return hits, section


class DefinitionsModule(Module):
    """Defining sentences per document for the terms of a consumed terms step."""

    name = _NAME
    fingerprint = "builtin.definitions/2"
    artifact_kind = "definitions"
    schema = "runjournal.builtin.definitions/v2"
    media_type = "application/json"
    chunk_type = DefinitionsChunk
    merged_type = list[Definition]
    artifact_type = list[Definition]
    override_keys = ()  # reads no --set key
    llm_stages = ()  # never calls a model
    known_params = _PARAMS
    strict_params = True  # an unknown param is an error before the run
    merge_streams = True  # merge reads its parts once, in order (docs/modules.md)

    @classmethod
    def check_params(cls, params: Mapping[str, Any]) -> list[str]:
        if "terms_step" in params:
            str_param(params, "terms_step", "terms", module=_NAME)
        return []

    def reads(self, stage: str, ctx: StageContext) -> dict[str, dict[str, Any]]:
        """Extract reads the terms' keys and texts of the lanes `lane_terms` reads; merge
        and normalize read no consumed artifact (docs/modules.md "Declaring what a stage
        reads"), so a term count that changed keeps the document's other extracts."""
        if stage != "extract":
            return {}
        step = require_step(ctx, "terms_step", "terms", module=_NAME)
        lanes = ctx.consumed.get(step, {})
        read = [ctx.lane] if ctx.lane in lanes else sorted(lanes)
        return {step: {lane: TermTexts(term_entries([lanes[lane]])) for lane in read}}

    def extract(self, chunk: Chunk, ctx: StageContext) -> DefinitionsChunk:
        step = require_step(ctx, "terms_step", "terms", module=_NAME)
        terms = lane_terms(ctx, step)
        hits, last_section = _chunk_hits(chunk.text, chunk.source, terms)
        return DefinitionsChunk(source=chunk.source, last_section=last_section, hits=hits)

    def merge(self, parts: Iterable[DefinitionsChunk], ctx: StageContext) -> list[Definition]:
        sections: dict[str, str | None] = {}
        merged: list[Definition] = []
        for part in parts:
            current = sections.get(part.source)
            for hit in part.hits:
                merged.append(
                    Definition(
                        key=hit.key,
                        term=hit.term,
                        pattern=hit.pattern,
                        source=part.source,
                        section=hit.section if hit.section is not None else current,
                        text=hit.text,
                        markdown=hit.markdown,
                    )
                )
            if part.last_section is not None:
                sections[part.source] = part.last_section
        return merged

    def normalize(self, merged: list[Definition], ctx: StageContext) -> Normalized:
        """Per term: the most trusted kind of definition, then the first sensible one
        (else the shortest)."""
        best: dict[str, Definition] = {}
        for definition in merged:
            current = best.get(definition.key)
            if current is None:
                best[definition.key] = definition
                continue
            rank, current_rank = pattern_rank(definition.pattern), pattern_rank(current.pattern)
            if rank < current_rank or (
                rank == current_rank
                and not _sensible(current)
                and (_sensible(definition) or len(definition.text) < len(current.text))
            ):
                best[definition.key] = definition
        value = [best[key] for key in sorted(best)]
        return Normalized(value, unknown_param_warnings(ctx.params, _PARAMS, module=_NAME))
