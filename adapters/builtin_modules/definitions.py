"""`builtin.definitions`: sentences that define a term found by a terms step.

A sentence defines a term when the term is its subject in one of a few English shapes
("X is a …", "X refers to …", "X means …", "X, also called Y, …", "we call … X",
"X: …"). Extract results carry offsets relative to their chunk plus the chunk's size;
merge turns them into source byte offsets, because chunks cover their source in order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
from runjournal.adapters.builtin_modules.text import (
    BuiltinParamError,
    byte_len,
    clean_inline,
    collapse_space,
    sentence_spans,
    str_param,
    term_key,
    unknown_param_warnings,
)
from runjournal.domain.modules import Chunk, Module, Normalized, StageContext

__all__ = [
    "Definition",
    "DefinitionHit",
    "DefinitionsChunk",
    "DefinitionsModule",
    "consumed_step",
    "definition_keys",
    "field_of",
    "lane_terms",
    "require_step",
    "term_entries",
]

_NAME = "builtin.definitions"
_PARAMS = ("terms_step",)


class DefinitionHit(msgspec.Struct, frozen=True):
    """A defining sentence; `start`/`end` are byte offsets relative to its chunk."""

    key: str
    term: str
    pattern: str
    start: int
    end: int
    text: str
    markdown: str


class DefinitionsChunk(msgspec.Struct, frozen=True):
    """A chunk's hits plus what merge needs to place them in the source."""

    source: str
    size: int
    hits: list[DefinitionHit]


class Definition(msgspec.Struct, frozen=True):
    """A defining sentence located in its source (UTF-8 byte offsets, end exclusive)."""

    key: str
    term: str
    pattern: str
    source: str
    start: int
    end: int
    text: str
    markdown: str


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
_IS = re.compile(
    _SUBJECT + r"\s+(?:is|are)\s+(?:(?:also|simply|just|essentially|usually|often)\s+)?"
    r"(?:a|an|the|one|any|what|how|where|when|whatever)\b",
    re.I,
)
_REFERS = re.compile(
    _SUBJECT + r"\s+(?:refers?\s+to|means?|denotes?|(?:is|are)\s+defined\s+as|stands?\s+for)\b",
    re.I,
)
_ALSO = re.compile(
    r"(?P<subj>[^,;:()]{1,80}?)\s*[,(]\s*(?:also\s+(?:called|known\s+as)|a\.k\.a\.?|aka)\s+"
    r"(?P<alias>[^,;:()]{1,60}?)\s*[,)]",
    re.I,
)
_COLON = re.compile(_SUBJECT + r"\s*(?::|\u2014|\u2013|\s-\s)\s*(?P<rest>\S.*)$")
_CALL = re.compile(
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


class DefinitionsModule(Module):
    """Defining sentences per document for the terms of a consumed terms step."""

    name = _NAME
    fingerprint = "builtin.definitions/1"
    artifact_kind = "definitions"
    schema = "runjournal.builtin.definitions/v1"
    media_type = "application/json"
    chunk_type = DefinitionsChunk
    merged_type = list[Definition]
    artifact_type = list[Definition]
    override_keys = ()  # reads no --set key

    def extract(self, chunk: Chunk, ctx: StageContext) -> DefinitionsChunk:
        step = require_step(ctx, "terms_step", "terms", module=_NAME)
        terms = lane_terms(ctx, step)
        text = chunk.text
        hits: list[DefinitionHit] = []
        for span in sentence_spans(text) if terms else []:
            raw = text[span.start : span.end]
            plain = clean_inline(raw)
            for key, pattern in definition_keys(plain, terms):
                start = byte_len(text[: span.start])
                hits.append(
                    DefinitionHit(
                        key=key,
                        term=terms[key],
                        pattern=pattern,
                        start=start,
                        end=start + byte_len(raw),
                        text=plain,
                        markdown=collapse_space(raw),
                    )
                )
        return DefinitionsChunk(source=chunk.source, size=byte_len(text), hits=hits)

    def merge(self, parts: list[DefinitionsChunk], ctx: StageContext) -> list[Definition]:
        offsets: dict[str, int] = {}
        merged: list[Definition] = []
        for part in parts:
            base = offsets.get(part.source, 0)
            for hit in part.hits:
                merged.append(
                    Definition(
                        key=hit.key,
                        term=hit.term,
                        pattern=hit.pattern,
                        source=part.source,
                        start=base + hit.start,
                        end=base + hit.end,
                        text=hit.text,
                        markdown=hit.markdown,
                    )
                )
            offsets[part.source] = base + part.size
        return merged

    def normalize(self, merged: list[Definition], ctx: StageContext) -> Normalized:
        """Keep the first sensible definition of each term (else its shortest)."""
        best: dict[str, Definition] = {}
        for definition in merged:
            current = best.get(definition.key)
            if current is None or (
                not _sensible(current)
                and (_sensible(definition) or len(definition.text) < len(current.text))
            ):
                best[definition.key] = definition
        value = [best[key] for key in sorted(best)]
        return Normalized(value, unknown_param_warnings(ctx.params, _PARAMS, module=_NAME))
