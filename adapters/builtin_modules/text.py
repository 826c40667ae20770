"""Small pure text helpers shared by the built-in modules.

Everything here is deterministic and position-independent: a helper sees one chunk's
text (read into blocks by `markup.py`) and never its offsets, because an extract
result is reused for an unchanged chunk even when the chunk moved inside its source
(docs/modules.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from runjournal.domain.lazy_pattern import LazyPattern

__all__ = [
    "STOPWORDS",
    "BuiltinParamError",
    "bool_param",
    "byte_len",
    "clean_inline",
    "collapse_space",
    "int_param",
    "ngram_counts",
    "singular",
    "str_param",
    "term_key",
    "token_spans",
    "unknown_param_warnings",
    "usable_term_key",
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


_IMAGE = LazyPattern(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = LazyPattern(r"\[([^\]]+)\](?:\([^)]*\)|\[[^\]]*\])")
_CODE = LazyPattern(r"(`+)(.+?)\1", re.S)
_STRONG = LazyPattern(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1", re.S)
_EM_STAR = LazyPattern(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?![\w*])", re.S)
_EM_UNDER = LazyPattern(r"(?<![\w_])_(?=\S)(.+?)(?<=\S)_(?![\w_])", re.S)
_TAG = LazyPattern(r"</?[A-Za-z][^>]*>|<!--.*?-->", re.S)
_BARE_URL = LazyPattern(r"\b(?:https?|ftp)://\S+|\bwww\.\S+\.\S+")
_MD_ESCAPE = LazyPattern(r"\\([!-/:-@\[-`{-~])")
_QUOTE_CONT = LazyPattern(r"\n[ \t]*>[ \t]?")
_KEPT = LazyPattern(r"\x00(\d+)\x00")
_SPACE = LazyPattern(r"\s+")


def clean_inline(raw: str) -> str:
    """Plain text of inline markdown: links, code spans, emphasis, tags and URLs removed."""
    text = _QUOTE_CONT.sub("\n", raw)
    text = _IMAGE.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    text = _BARE_URL.sub("", text)
    codes: list[str] = []

    def keep(match: re.Match[str]) -> str:  # code is not emphasis: `__init__` stays
        codes.append(match.group(2).strip())
        return f"\x00{len(codes) - 1}\x00"

    text = _CODE.sub(keep, text)
    text = _STRONG.sub(r"\2", text)
    text = _EM_STAR.sub(r"\1", text)
    text = _EM_UNDER.sub(r"\1", text)
    text = _TAG.sub("", text)
    if codes:
        text = _KEPT.sub(lambda m: codes[int(m.group(1))], text)
    if "&" in text:
        import html  # here: most chunks have no entity, and a resume runs no extract

        text = html.unescape(text)
    text = _MD_ESCAPE.sub(r"\1", text)
    return _SPACE.sub(" ", text).strip()


def collapse_space(raw: str) -> str:
    """One-line form of a raw markdown fragment (quote markers dropped)."""
    return _SPACE.sub(" ", _QUOTE_CONT.sub("\n", raw)).strip()


_ALPHA_WORD = LazyPattern(r"[^\W\d_]+(?:-[^\W\d_]+)*")
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


_APOSTROPHE_S = LazyPattern(r"['\u2019]s\b")
# `_` is not an edge: `_build` and `__init__` are names (emphasis is gone by then).
_EDGE_PUNCT = "\"'`*()[]{}<>.,;:!?\u2018\u2019\u201c\u201d"


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


_TOKEN = LazyPattern(r"[^\W\d_][\w]*(?:-\w+)*")


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


_ONE_LETTER_LANGUAGE = LazyPattern(r"[^\W\d_](?:\+\+|#)")  # C++, C#, F#
_VALUE_WORDS = frozenset({"true", "false", "none", "null", "nil", "yes"})


def usable_term_key(key: str) -> bool:
    """Whether a key can be a term: not a stopword, a single letter or a bare number.

    `C++` and `C#` keep their one letter; `A`, `s`, `and` or `2` never make a term.
    """
    words = key.split()
    if not words or all(w in STOPWORDS or w in _VALUE_WORDS for w in words):
        return False
    alnum = sum(c.isalnum() for c in key)
    if alnum < 2 and not _ONE_LETTER_LANGUAGE.fullmatch(key):
        return False
    return any(c.isalpha() for c in key)


def ngram_counts(sentences: Iterable[str], *, max_n: int = 4) -> dict[str, int]:
    """Counts of word n-gram keys in sentences (markdown dialect of `markup.blocks`).

    An n-gram never crosses punctuation and never starts or ends with a stopword, so
    the table stays small; keys match `term_key` of the same words.
    """
    counts: dict[str, int] = {}
    for sentence in sentences:
        plain = _APOSTROPHE_S.sub("", clean_inline(sentence))
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


_OUTPUT_COMPONENT = LazyPattern(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


def valid_output_name(name: str) -> bool:
    """A logical output name: `/`-separated `[A-Za-z0-9._-]` components, none hidden."""
    parts = name.split("/")
    return (
        len(name) <= 255
        and all(_OUTPUT_COMPONENT.fullmatch(p) for p in parts)
        and all(p not in (".", "..") for p in parts)
    )
