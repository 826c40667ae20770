"""`builtin.terms`: candidate glossary terms of each document, found without an LLM.

Candidates are terms of definition lists and glossary blocks, bold phrases (and
reST/MyST `term` roles), backticked identifiers (and code roles), capitalised
multi-word phrases and repeated lowercase bigrams; markup is read by `markup.py`.
Counting is separate from discovery: every chunk reports a table of word n-gram counts,
so a term marked once in bold is counted wherever it is mentioned plainly, in any chunk
of the document. The artifact holds no chunk id or offset: an edit that leaves a
document's terms and counts alone leaves its artifact byte-identical (docs/modules.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any

import msgspec
from runjournal.adapters.builtin_modules.markup import BlockKind, blocks, split_sentences, syntax_of
from runjournal.adapters.builtin_modules.text import (
    STOPWORDS,
    clean_inline,
    int_param,
    ngram_counts,
    singular,
    term_key,
    unknown_param_warnings,
    usable_term_key,
)
from runjournal.domain.lazy_pattern import LazyPattern
from runjournal.domain.modules import Chunk, Module, Normalized, StageContext

__all__ = ["Term", "TermForm", "TermKind", "TermsChunk", "TermsModule"]

_NAME = "builtin.terms"
_PARAMS = ("min_count", "max_terms")


class TermKind(Enum):
    """How a term was marked in the text; the order is the order of trust."""

    DEFINED = "defined"  # the term of a definition list or glossary item, or a `dfn`
    EMPHASIS = "emphasis"
    CODE = "code"
    PHRASE = "phrase"
    BIGRAM = "bigram"


_KIND_RANK = {kind: rank for rank, kind in enumerate(TermKind)}


class TermForm(msgspec.Struct, frozen=True):
    """One spelling of a candidate in one chunk; `initial` counts sentence-initial uses."""

    text: str
    key: str
    kind: TermKind
    count: int
    initial: int = 0


class TermsChunk(msgspec.Struct, frozen=True):
    """A chunk's candidates and its n-gram counts (position-independent)."""

    forms: list[TermForm]
    ngrams: dict[str, int]


class Term(msgspec.Struct, frozen=True):
    """A term of one document: display text, key, mentions, how it was marked."""

    text: str
    key: str
    count: int
    kind: TermKind


_CODE_SPAN = LazyPattern(r"(`+)([^`\n]+?)\1")
_DFN = LazyPattern(r"<dfn>(.+?)</dfn>", re.S)
_STRONG = LazyPattern(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_IDENTIFIER = LazyPattern(r"[A-Za-z_][\w.:/-]*(?:\(\))?")
_PHRASE = LazyPattern(r"(?<![\w-])[A-Z][\w-]*(?: [A-Z][\w-]*)+(?![\w-])")
_ALPHA_WORD = LazyPattern(r"[a-z]+")
_ALPHA = LazyPattern(r"[^\W\d_]{3,}(?:-[^\W\d_]+)*")
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
            if usable_term_key(term_key(text))
        ]


def _defined_term(raw: str) -> str | None:
    """The term of a definition-list item or `dfn`, or None for a long or empty line."""
    text = clean_inline(raw).strip(_EDGE)
    words = text.split()
    if not 1 <= len(words) <= 8 or len(text) > 80 or not any(c.isalpha() for c in text):
        return None
    return text


def _scan_sentence(raw: str, tally: _FormTally) -> None:
    for match in _DFN.finditer(raw):
        term = _defined_term(match.group(1))
        if term is not None:
            tally.add(term, TermKind.DEFINED)
    for match in _CODE_SPAN.finditer(raw):
        code = match.group(2).strip()
        if len(code) <= 40 and _IDENTIFIER.fullmatch(code):
            tally.add(code, TermKind.CODE)
    no_code = _CODE_SPAN.sub(lambda m: " " * len(m.group()), raw)
    for match in _STRONG.finditer(no_code):
        term = _emphasis_term(match.group(2))
        if no_code[match.end() : match.end() + 1] == ":":
            term = None  # `**Note**: …` is a label
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


class _Spellings:
    """A key's forms folded as the merge reads them (it keeps no `TermForm`): its best
    kind's rank, and per spelling in order of first use its count, sentence-initial uses
    and best kind's rank."""

    __slots__ = ("rank", "texts")

    def __init__(self) -> None:
        self.rank = len(_KIND_RANK)
        self.texts: dict[str, list[int]] = {}

    def add(self, text: str, kind: TermKind, count: int, initial: int) -> None:
        rank = _KIND_RANK[kind]
        self.rank = min(self.rank, rank)
        slot = self.texts.get(text)
        if slot is None:
            self.texts[text] = [count, initial, rank]
        else:
            slot[0] += count
            slot[1] += initial
            slot[2] = min(slot[2], rank)

    def marked(self) -> int:
        return sum(slot[0] for slot in self.texts.values())


_KINDS = list(TermKind)


def _display(key: str, spellings: _Spellings) -> tuple[str, TermKind]:
    """Pick the spelling readers see: singular, not sentence-initial, most used."""
    kind = _KINDS[spellings.rank]
    totals = spellings.texts
    order = list(totals)

    def score(text: str) -> tuple[bool, bool, bool, int, int]:
        count, initial, rank = totals[text]
        is_singular = clean_inline(text).casefold() == key
        best_kind = rank == spellings.rank  # a defined term's own spelling
        return (is_singular, count > initial, best_kind, count, -order.index(text))

    text = max(order, key=score)
    count, initial, _ = totals[text]
    if count == initial and text[:1].isupper() and text[1:] == text[1:].lower():
        text = text[:1].lower() + text[1:]
    return text, kind


class TermsModule(Module):
    """Candidate terms per document, filtered by `min_count` and capped by `max_terms`."""

    name = _NAME
    fingerprint = "builtin.terms/3"  # 3: defined terms are never cut
    artifact_kind = "terms"
    schema = "runjournal.builtin.terms/v2"
    media_type = "application/json"
    chunk_type = TermsChunk
    merged_type = list[Term]
    artifact_type = list[Term]
    override_keys = ()  # reads no --set key
    llm_stages = ()  # never calls a model
    known_params = _PARAMS
    strict_params = True  # an unknown param is an error before the run
    merge_streams = True  # merge reads its parts once, in order (docs/modules.md)

    @classmethod
    def check_params(cls, params: Mapping[str, Any]) -> list[str]:
        int_param(params, "min_count", 2, module=_NAME, minimum=1)
        int_param(params, "max_terms", 50, module=_NAME, minimum=1)
        return []

    def extract(self, chunk: Chunk, ctx: StageContext) -> TermsChunk:
        tally = _FormTally()
        counted: list[str] = []
        for block in blocks(chunk.text, syntax_of(chunk.source, chunk.text)):
            if block.kind is BlockKind.HEADING:
                counted.append(block.text)
                continue
            if block.kind is BlockKind.DEFINITION:
                counted.extend(block.terms)
                for raw in block.terms:
                    term = _defined_term(raw)
                    if term is not None:
                        tally.add(term, TermKind.DEFINED)
            sentences = split_sentences(block.text)
            counted.extend(sentences)
            for sentence in sentences:
                _scan_sentence(sentence, tally)
        return TermsChunk(forms=tally.forms(), ngrams=ngram_counts(counted))

    def merge(self, parts: Iterable[TermsChunk], ctx: StageContext) -> list[Term]:
        totals: dict[str, int] = {}
        forms: dict[str, _Spellings] = {}
        for part in parts:  # folded as they come: a part is dropped once read
            for key, count in part.ngrams.items():
                totals[key] = totals.get(key, 0) + count
            for form in part.forms:
                spellings = forms.get(form.key)
                if spellings is None:
                    spellings = forms[form.key] = _Spellings()
                spellings.add(form.text, form.kind, form.count, form.initial)
        for key in sorted(totals):
            if key not in forms and totals[key] >= 2 and _noun_ish_bigram(key):
                forms[key] = bigram = _Spellings()
                bigram.add(key, TermKind.BIGRAM, totals[key], 0)
        terms: list[Term] = []
        for key, spellings in forms.items():
            if not usable_term_key(key):
                continue
            text, kind = _display(key, spellings)
            marked = spellings.marked()
            count = max(totals.get(key, 0), marked)
            if kind is TermKind.CODE and _ALPHA_WORD.fullmatch(key) and marked * 4 < count:
                continue  # `default` in code once, as a plain word everywhere: not a term
            terms.append(Term(text, key, count, kind))
        return terms

    def normalize(self, merged: list[Term], ctx: StageContext) -> Normalized:
        min_count = int_param(ctx.params, "min_count", 2, module=_NAME, minimum=1)
        max_terms = int_param(ctx.params, "max_terms", 50, module=_NAME, minimum=1)
        # A defined term is a term even when it is mentioned fewer than min_count times.
        kept = [t for t in merged if t.count >= min_count or t.kind is TermKind.DEFINED]
        kept.sort(key=lambda t: (_KIND_RANK[t.kind], -t.count, t.key))
        # Terms the document defines (a glossary's entries) are never cut: `max_terms`
        # bounds the other candidates, and what it drops is said (issue 32).
        defined = sum(1 for t in kept if t.kind is TermKind.DEFINED)
        capped = kept[: max(max_terms, defined)]
        dropped = len(kept) - len(capped)
        kept = sorted(capped, key=lambda t: (-t.count, t.key, t.text))
        warnings = unknown_param_warnings(ctx.params, _PARAMS, module=_NAME)
        if dropped:
            warnings.append(
                f"{ctx.lane}: {dropped} candidate term(s) over max_terms={max_terms} dropped "
                f"(the {defined} term(s) the document defines are always kept)"
            )
        if not kept:
            warnings.append(f"{ctx.lane}: no terms found (min_count={min_count})")
        return Normalized(kept, warnings)
