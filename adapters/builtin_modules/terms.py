"""`builtin.terms`: candidate glossary terms of each document, found without an LLM.

Candidates are bold phrases, backticked identifiers, capitalised multi-word phrases and
repeated lowercase bigrams. Counting is separate from discovery: every chunk reports a
table of word n-gram counts, so a term marked once in bold is counted wherever it is
mentioned plainly, in any chunk of the document.
"""

from __future__ import annotations

import re
from enum import Enum

import msgspec
from runjournal.adapters.builtin_modules.text import (
    STOPWORDS,
    clean_inline,
    int_param,
    ngram_counts,
    sentence_spans,
    singular,
    term_key,
    unknown_param_warnings,
)
from runjournal.domain.modules import Chunk, Module, Normalized, StageContext

__all__ = ["Term", "TermForm", "TermKind", "TermsChunk", "TermsModule"]

_NAME = "builtin.terms"
_PARAMS = ("min_count", "max_terms")


class TermKind(Enum):
    """How a term was marked in the text; the order is the order of trust."""

    EMPHASIS = "emphasis"
    CODE = "code"
    PHRASE = "phrase"
    BIGRAM = "bigram"


_KIND_RANK = {TermKind.EMPHASIS: 0, TermKind.CODE: 1, TermKind.PHRASE: 2, TermKind.BIGRAM: 3}


class TermForm(msgspec.Struct, frozen=True):
    """One spelling of a candidate in one chunk; `initial` counts sentence-initial uses."""

    text: str
    key: str
    kind: TermKind
    count: int
    initial: int = 0


class TermsChunk(msgspec.Struct, frozen=True):
    """A chunk's candidates and its n-gram counts (position-independent)."""

    chunk: str
    forms: list[TermForm]
    ngrams: dict[str, int]


class Term(msgspec.Struct, frozen=True):
    """A term of one document: display text, key, mentions, how it was marked."""

    text: str
    key: str
    count: int
    kind: TermKind
    first_seen_chunk: str | None = None


_CODE_SPAN = re.compile(r"(`+)([^`\n]+?)\1")
_STRONG = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_IDENTIFIER = re.compile(r"[A-Za-z_][\w.:/-]*(?:\(\))?")
_PHRASE = re.compile(r"(?<![\w-])[A-Z][\w-]*(?: [A-Z][\w-]*)+(?![\w-])")
_ALPHA = re.compile(r"[^\W\d_]{3,}(?:-[^\W\d_]+)*")
_EDGE = " \t.,;:!?\"'()"


def _emphasis_term(inner: str) -> str | None:
    """The term a bold span marks, or None for labels like `**Note:**` and long runs."""
    if inner.rstrip().endswith(":"):
        return None
    text = clean_inline(inner).strip(_EDGE)
    words = text.split()
    if not 1 <= len(words) <= 5 or len(text) > 60 or not any(c.isalpha() for c in text):
        return None
    if all(w.casefold() in STOPWORDS for w in words):
        return None
    return text


def _phrase_term(phrase: str) -> str | None:
    words = phrase.split(" ")
    while words and words[0].casefold() in STOPWORDS:
        words.pop(0)
    while words and words[-1].casefold() in STOPWORDS:
        words.pop()
    return " ".join(words) if 2 <= len(words) <= 5 else None


class _FormTally:
    """Insertion-ordered tally of (text, kind) spellings."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, TermKind], list[int]] = {}

    def add(self, text: str, kind: TermKind, *, count: int = 1, initial: int = 0) -> None:
        slot = self.counts.setdefault((text, kind), [0, 0])
        slot[0] += count
        slot[1] += initial

    def forms(self) -> list[TermForm]:
        return [
            TermForm(text, term_key(text), kind, count, initial)
            for (text, kind), (count, initial) in self.counts.items()
            if term_key(text)
        ]


def _scan_sentence(raw: str, tally: _FormTally) -> None:
    for match in _CODE_SPAN.finditer(raw):
        code = match.group(2).strip()
        if len(code) <= 40 and _IDENTIFIER.fullmatch(code):
            tally.add(code, TermKind.CODE)
    no_code = _CODE_SPAN.sub(lambda m: " " * len(m.group()), raw)
    for match in _STRONG.finditer(no_code):
        term = _emphasis_term(match.group(2))
        if term is not None:
            at_start = not no_code[: match.start()].strip()
            tally.add(term, TermKind.EMPHASIS, initial=int(at_start))
    for match in _PHRASE.finditer(clean_inline(raw)):
        term = _phrase_term(match.group())
        if term is not None:
            tally.add(term, TermKind.PHRASE)


def _noun_ish_bigram(key: str) -> bool:
    """Two plain words, no adverb, and a singular first word (`calls fsync` is a verb)."""
    words = key.split(" ")
    return (
        len(words) == 2
        and all(_ALPHA.fullmatch(w) for w in words)
        and not any(w.endswith("ly") for w in words)
        and singular(words[0]) == words[0]
    )


def _display(key: str, forms: list[TermForm]) -> tuple[str, TermKind]:
    """Pick the spelling readers see: singular, not sentence-initial, most used."""
    kind = min((f.kind for f in forms), key=_KIND_RANK.__getitem__)
    totals: dict[str, list[int]] = {}
    for form in forms:
        slot = totals.setdefault(form.text, [0, 0])
        slot[0] += form.count
        slot[1] += form.initial
    order = list(totals)

    def score(text: str) -> tuple[bool, bool, int, int]:
        count, initial = totals[text]
        is_singular = clean_inline(text).casefold() == key
        return (is_singular, count > initial, count, -order.index(text))

    text = max(order, key=score)
    count, initial = totals[text]
    if count == initial and text[:1].isupper() and text[1:] == text[1:].lower():
        text = text[:1].lower() + text[1:]
    return text, kind


class TermsModule(Module):
    """Candidate terms per document, filtered by `min_count` and capped by `max_terms`."""

    name = _NAME
    fingerprint = "builtin.terms/1"
    artifact_kind = "terms"
    schema = "runjournal.builtin.terms/v1"
    media_type = "application/json"
    chunk_type = TermsChunk
    merged_type = list[Term]
    artifact_type = list[Term]
    override_keys = ()  # reads no --set key

    def extract(self, chunk: Chunk, ctx: StageContext) -> TermsChunk:
        tally = _FormTally()
        for span in sentence_spans(chunk.text):
            _scan_sentence(chunk.text[span.start : span.end], tally)
        return TermsChunk(chunk=chunk.id, forms=tally.forms(), ngrams=ngram_counts(chunk.text))

    def merge(self, parts: list[TermsChunk], ctx: StageContext) -> list[Term]:
        totals: dict[str, int] = {}
        forms: dict[str, list[TermForm]] = {}
        for part in parts:
            for key, count in part.ngrams.items():
                totals[key] = totals.get(key, 0) + count
            for form in part.forms:
                forms.setdefault(form.key, []).append(form)
        for key in sorted(totals):
            if key not in forms and totals[key] >= 2 and _noun_ish_bigram(key):
                forms[key] = [TermForm(key, key, TermKind.BIGRAM, totals[key])]
        first_seen: dict[str, str] = {}
        for part in parts:
            for key in (*(f.key for f in part.forms), *part.ngrams):
                if key in forms and key not in first_seen:
                    first_seen[key] = part.chunk
        terms: list[Term] = []
        for key, key_forms in forms.items():
            text, kind = _display(key, key_forms)
            count = max(totals.get(key, 0), sum(f.count for f in key_forms))
            terms.append(Term(text, key, count, kind, first_seen.get(key)))
        return terms

    def normalize(self, merged: list[Term], ctx: StageContext) -> Normalized:
        min_count = int_param(ctx.params, "min_count", 2, module=_NAME, minimum=1)
        max_terms = int_param(ctx.params, "max_terms", 50, module=_NAME, minimum=1)
        kept = [t for t in merged if t.count >= min_count]
        kept.sort(key=lambda t: (_KIND_RANK[t.kind], -t.count, t.key))
        kept = sorted(kept[:max_terms], key=lambda t: (-t.count, t.key, t.text))
        warnings = unknown_param_warnings(ctx.params, _PARAMS, module=_NAME)
        if not kept:
            warnings.append(f"{ctx.lane}: no terms found (min_count={min_count})")
        return Normalized(kept, warnings)
