"""Small pure text helpers shared by the built-in modules.

Everything here is deterministic and position-independent: a helper sees one chunk's
text and reports character spans relative to it, because an extract result is reused
for an unchanged chunk even when the chunk moved inside its source (SEMANTICS §3).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from enum import Enum
from typing import Any, NamedTuple

__all__ = [
    "STOPWORDS",
    "BuiltinParamError",
    "Span",
    "Unit",
    "UnitKind",
    "bool_param",
    "byte_len",
    "clean_inline",
    "collapse_space",
    "int_param",
    "markdown_units",
    "ngram_counts",
    "sentence_spans",
    "singular",
    "str_param",
    "term_key",
    "token_spans",
    "unknown_param_warnings",
    "valid_output_name",
]

# Function words and very common verbs/adjectives: an n-gram may not start or end with
# one, and they never make a term on their own.
_STOPWORD_TEXT = """
    a about above across after again against all almost along also although always am
    among amid an and
    another any anything are around as at away back be because been before being below
    between both but by can cannot could did do does doing done down during each either
    else enough even ever every few first for from further get gets given go goes had has
    have having he her here hers him his how however i if in instead into is it its itself
    just last later least less let like made make makes many may me might more most much
    must my near need needs never new next no nor not nothing now of off often old on once
    one only onto or other others otherwise our ours out over own per rather really same
    second see seen several shall she should since so some something still such than that
    the their theirs them then there therefore these they this those though through thus
    to together too two under until up upon us use used uses using usually very via was
    we well were what whatever when whenever where whether which while who whom whose why
    will with within without would yet you your yours
    behind beneath beside besides beyond despite except inside outside toward towards
    e.g i.e etc vs
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())

_ARTICLES = frozenset({"a", "an", "the"})


class BuiltinParamError(ValueError):
    """A built-in module was given a `params` value it cannot use."""


class Span(NamedTuple):
    """A half-open character span [start, end) of a chunk's text."""

    start: int
    end: int


class UnitKind(Enum):
    """What a markdown block is; headings are mentions but never sentences."""

    HEADING = "heading"
    PROSE = "prose"


class Unit(NamedTuple):
    kind: UnitKind
    span: Span


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]+|$)")
_LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+")
_QUOTE = re.compile(r"^[ \t]*>[ \t]?")
_TABLE = re.compile(r"^[ \t]*\|")
_RULE = re.compile(r"^ {0,3}(?:(?:-[ \t]*){3,}|(?:\*[ \t]*){3,}|(?:_[ \t]*){3,})$")


def markdown_units(text: str) -> list[Unit]:
    """Split markdown into headings and prose blocks (paragraphs, list items, quotes).

    Fenced code, tables and rules are skipped. A fence left open at the end of the text
    swallows the rest, which is right for a chunk cut inside a long code block.
    """
    units: list[Unit] = []
    fence: str | None = None
    start: int | None = None
    end = 0
    pos = 0

    def flush() -> None:
        nonlocal start
        if start is not None and end > start:
            units.append(Unit(UnitKind.PROSE, Span(start, end)))
        start = None

    for line in text.splitlines(keepends=True):
        line_start = pos
        pos += len(line)
        body = line.rstrip("\r\n")
        stripped = body.strip()
        fence_match = _FENCE.match(body)
        if fence is not None:
            if fence_match and fence_match.group(1)[0] == fence[0]:
                fence = None
            continue
        if fence_match:
            flush()
            fence = fence_match.group(1)
            continue
        if not stripped or _TABLE.match(body) or _RULE.match(body):
            flush()
            continue
        if _HEADING.match(body):
            flush()
            units.append(Unit(UnitKind.HEADING, Span(line_start, line_start + len(body))))
            continue
        marker = _LIST_ITEM.match(body)
        if marker:
            flush()
            start = line_start + marker.end()
        elif start is None:
            quote = _QUOTE.match(body)
            lead = quote.end() if quote else len(body) - len(body.lstrip())
            start = line_start + lead
        end = line_start + len(body.rstrip())
    flush()
    return units


_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.", "Dr.", "Mr.", "Ms.", "No.")
_SENTENCE_END = re.compile(r"[.!?][\"')\]*_`]*(?=\s+[\"'(\[*_`]*[A-Z0-9])")


def sentence_spans(text: str, *, headings: bool = False) -> list[Span]:
    """Sentences of the prose blocks of `text` (and heading lines, if asked)."""
    spans: list[Span] = []
    for unit in markdown_units(text):
        if unit.kind is UnitKind.HEADING:
            if headings:
                spans.append(unit.span)
            continue
        spans.extend(_split_sentences(text, unit.span))
    return spans


def _split_sentences(text: str, span: Span) -> Iterator[Span]:
    start = span.start
    block = text[span.start : span.end]
    for match in _SENTENCE_END.finditer(block):
        cut = span.start + match.end()
        if text[start:cut].endswith(_ABBREVIATIONS):
            continue
        yield Span(start, cut)
        start = cut
        while start < span.end and text[start].isspace():
            start += 1
    if start < span.end:
        yield Span(start, span.end)


_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]+)\](?:\([^)]*\)|\[[^\]]*\])")
_CODE = re.compile(r"(`+)(.+?)\1", re.S)
_STRONG = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1", re.S)
_EM_STAR = re.compile(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?![\w*])", re.S)
_EM_UNDER = re.compile(r"(?<![\w_])_(?=\S)(.+?)(?<=\S)_(?![\w_])", re.S)
_TAG = re.compile(r"</?[A-Za-z][^>]*>")
_QUOTE_CONT = re.compile(r"\n[ \t]*>[ \t]?")
_SPACE = re.compile(r"\s+")


def clean_inline(raw: str) -> str:
    """Plain text of inline markdown: links, code spans, emphasis and tags removed."""
    text = _QUOTE_CONT.sub("\n", raw)
    text = _IMAGE.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    text = _CODE.sub(lambda m: m.group(2).strip(), text)
    text = _STRONG.sub(r"\2", text)
    text = _EM_STAR.sub(r"\1", text)
    text = _EM_UNDER.sub(r"\1", text)
    text = _TAG.sub("", text)
    return _SPACE.sub(" ", text).strip()


def collapse_space(raw: str) -> str:
    """One-line form of a raw markdown fragment (quote markers dropped)."""
    return _SPACE.sub(" ", _QUOTE_CONT.sub("\n", raw)).strip()


_ALPHA_WORD = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*")
_VOWELS = frozenset("aeiou")


def singular(word: str) -> str:
    """A crude English singular, used only to make keys; never shown to readers."""
    if len(word) <= 3 or not _ALPHA_WORD.fullmatch(word):
        return word
    if word.endswith(("ss", "us", "is")):
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "xes")):
        return word[:-2]
    if word.endswith("ches"):
        return word[:-1] if word[-5] in _VOWELS else word[:-2]
    if word.endswith("s"):
        return word[:-1]
    return word


_APOSTROPHE_S = re.compile(r"['\u2019]s\b")
_EDGE_PUNCT = "\"'`*_()[]{}<>.,;:!?\u2018\u2019\u201c\u201d"


def term_key(text: str) -> str:
    """The key two spellings of one term share: case, plural and articles folded."""
    cleaned = _APOSTROPHE_S.sub("", clean_inline(text)).casefold()
    words = [w.strip(_EDGE_PUNCT) for w in cleaned.split()]
    words = [w for w in words if w]
    while len(words) > 1 and words[0] in _ARTICLES:
        words.pop(0)
    if words:
        words[-1] = singular(words[-1])
    return " ".join(words)


_TOKEN = re.compile(r"[^\W\d_][\w]*(?:-\w+)*")


def token_spans(text: str) -> list[list[tuple[str, int, int]]]:
    """Word tokens as (casefolded word, start, end), in runs unbroken by punctuation."""
    runs: list[list[tuple[str, int, int]]] = []
    current: list[tuple[str, int, int]] = []
    last_end = 0
    for match in _TOKEN.finditer(text):
        if current and text[last_end : match.start()].strip():
            runs.append(current)
            current = []
        current.append((match.group().casefold(), match.start(), match.end()))
        last_end = match.end()
    if current:
        runs.append(current)
    return runs


def ngram_counts(text: str, *, max_n: int = 4) -> dict[str, int]:
    """Counts of word n-gram keys in the sentences and headings of a markdown chunk.

    An n-gram never crosses punctuation and never starts or ends with a stopword, so
    the table stays small; keys match `term_key` of the same words.
    """
    counts: dict[str, int] = {}
    for span in sentence_spans(text, headings=True):
        plain = _APOSTROPHE_S.sub("", clean_inline(text[span.start : span.end]))
        for run in token_spans(plain):
            words = [w for w, _, _ in run]
            for i, first in enumerate(words):
                if first in STOPWORDS or len(first) < 2:
                    continue
                for n in range(1, max_n + 1):
                    if i + n > len(words):
                        break
                    last = words[i + n - 1]
                    if last in STOPWORDS or len(last) < 2:
                        continue
                    key = " ".join([*words[i : i + n - 1], singular(last)])
                    counts[key] = counts.get(key, 0) + 1
    return counts


def byte_len(text: str) -> int:
    return len(text.encode("utf-8"))


def int_param(
    params: Mapping[str, Any], name: str, default: int, *, module: str, minimum: int = 0
) -> int:
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BuiltinParamError(
            f"{module}: params.{name} must be an integer >= {minimum}, got {value!r}"
        )
    return value


def str_param(params: Mapping[str, Any], name: str, default: str, *, module: str) -> str:
    value = params.get(name, default)
    if not isinstance(value, str) or not value:
        raise BuiltinParamError(f"{module}: params.{name} must be a non-empty string")
    return value


def bool_param(params: Mapping[str, Any], name: str, default: bool, *, module: str) -> bool:
    value = params.get(name, default)
    if not isinstance(value, bool):
        raise BuiltinParamError(f"{module}: params.{name} must be true or false, got {value!r}")
    return value


def unknown_param_warnings(
    params: Mapping[str, Any], known: tuple[str, ...], *, module: str
) -> list[str]:
    """Warn about likely typos instead of failing: params are free-form for plugins."""
    unknown = sorted(k for k in params if k not in known)
    if not unknown:
        return []
    return [f"{module}: unknown params ignored: {', '.join(unknown)}"]


_OUTPUT_COMPONENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


def valid_output_name(name: str) -> bool:
    """A logical output name: `/`-separated `[A-Za-z0-9._-]` components, none hidden."""
    parts = name.split("/")
    return (
        len(name) <= 255
        and all(_OUTPUT_COMPONENT.fullmatch(p) for p in parts)
        and all(p not in (".", "..") for p in parts)
    )
