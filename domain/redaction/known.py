"""The secrets this process holds, scrubbed by value wherever text is redacted.

Shapes (`scanning`) find credentials by their look; a local server's key or any value of
an `api_key_env` variable has no look. The composition root and the LLM runtime
register every secret they read (docs/internals.md "Known secrets"); `redact_text`, the
one redaction boundary, then hides it before any other rule runs and before anything
is cut. A registered secret is hidden in all its derived forms: URL-encoded,
JSON-escaped, HTML-escaped, base64 (standard and URL-safe, at any alignment inside a
longer base64 text), split by line breaks or other white space, and any piece of 8 or
more characters of any of those (a value cut short is still hidden).

Pure: the registry is one immutable `KnownSecrets` value swapped whole; callers that
register from several threads serialize their calls (`adapters/secrets.py` does).
Nothing is compiled until a secret is registered.
"""

from __future__ import annotations

import functools
import re

# Annotations only (never evaluated): importing `typing` would cost start-up time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Final

KNOWN_NAME: Final = "known_secret"
KNOWN_MARKER: Final = f"[REDACTED:{KNOWN_NAME}]"
MIN_FRAGMENT: Final = 8
"""Pieces this long or longer of a registered form are hidden; shorter values and
pieces are not (they cannot be told apart from ordinary words)."""

# Between two characters of a whole form: white space, or its JSON/C escape, any number.
_SEPARATOR: Final = r"(?:\s|\\[nrtf])*"
_UNRESERVED: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


def _percent(value: str, *, lower: bool, plus: bool) -> str:
    """RFC 3986 percent-encoding of every byte outside the unreserved set."""
    out = []
    for byte in value.encode("utf-8", "surrogatepass"):
        ch = chr(byte)
        if ch in _UNRESERVED:
            out.append(ch)
        elif plus and ch == " ":
            out.append("+")
        else:
            out.append(f"%{byte:02x}" if lower else f"%{byte:02X}")
    return "".join(out)


def _base64_forms(data: bytes) -> set[str]:
    """The base64 of `data` whole, and the characters that encode only `data` when it sits
    at each of the three alignments inside a longer encoded text."""
    import base64

    forms: set[str] = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(data).decode("ascii")
        forms |= {whole, whole.rstrip("=")}
        for pad in range(3):
            encoded = encode(b"\0" * pad + data).decode("ascii").rstrip("=")
            first = -(-8 * pad // 6)  # the first character made of `data` bits only
            last = 8 * (pad + len(data)) // 6  # past the last such character
            forms.add(encoded[first:last])
    return forms


def derived_forms(value: str) -> frozenset[str]:
    """`value` and every form it takes in text: URL-encoded, JSON-, HTML- and
    repr-escaped, base64 (each alignment); only those of `MIN_FRAGMENT` or more."""
    import html
    import json

    forms = {
        value,
        _percent(value, lower=False, plus=False),
        _percent(value, lower=True, plus=False),
        _percent(value, lower=False, plus=True),
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        html.escape(value, quote=True),
        repr(value)[1:-1],
    }
    forms |= _base64_forms(value.encode("utf-8", "surrogatepass"))
    return frozenset(f for f in forms if len(f) >= MIN_FRAGMENT)


def _trie(words: Iterable[str], separator: str, first: bool = True) -> str:
    """An alternation of `words` factored by common prefixes (one branch tried per
    position), with `separator` allowed before every character but the first."""
    words = list(words)
    optional = "" in words
    by_first: dict[str, list[str]] = {}
    for word in sorted({w for w in words if w}):
        by_first.setdefault(word[0], []).append(word[1:])
    if not by_first:
        return ""
    lead = "" if first else separator
    alts = [lead + re.escape(c) + _trie(tails, separator, False) for c, tails in by_first.items()]
    body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
    return f"(?:{body})?" if optional else body


class KnownSecrets:
    """An immutable set of registered secrets and the matchers built from them."""

    def __init__(self, values: frozenset[str] = frozenset()) -> None:
        self.values = values
        forms: set[str] = set()
        for value in values:
            forms |= derived_forms(value)
        self.forms = frozenset(forms)
        self.fragments = frozenset(
            form[i : i + MIN_FRAGMENT]
            for form in self.forms
            for i in range(len(form) - MIN_FRAGMENT + 1)
        )

    def with_values(self, values: Iterable[str]) -> KnownSecrets:
        """A registry holding these values too (itself when none is new)."""
        added = frozenset(v for v in values if isinstance(v, str) and v)
        if added <= self.values:
            return self
        return KnownSecrets(self.values | added)

    @functools.cached_property
    def _whole(self) -> re.Pattern[str]:
        return re.compile(_trie(self.forms, _SEPARATOR))

    @functools.cached_property
    def _fragment(self) -> re.Pattern[str]:
        return re.compile(_trie(self.fragments, ""))

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Where the registered secrets are in `text`, sorted and merged: whole forms
        (white space or line breaks may split them), and pieces of `MIN_FRAGMENT` or more
        characters of any form."""
        if not self.forms or len(text) < MIN_FRAGMENT:
            return []
        found = [m.span() for m in self._whole.finditer(text) if m.end() > m.start()]
        found += self._pieces(text)
        found.sort()
        merged: list[tuple[int, int]] = []
        for start, end in found:
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        return merged

    def _pieces(self, text: str) -> list[tuple[int, int]]:
        spans: list[tuple[int, int]] = []
        fragments, size = self.fragments, MIN_FRAGMENT
        pos = 0
        while (hit := self._fragment.search(text, pos)) is not None:
            start = hit.start()
            end = start + size
            at = start + 1
            while at < end:  # every piece starting inside the span widens it
                if text[at : at + size] in fragments:
                    end = at + size
                at += 1
            spans.append((start, end))
            pos = end
        return spans

    def scrub(self, text: str) -> str:
        """`text` with every registered secret replaced by `KNOWN_MARKER` (`text` itself
        when there is none)."""
        spans = self.spans(text)
        if not spans:
            return text
        parts: list[str] = []
        pos = 0
        for start, end in spans:
            parts += [text[pos:start], KNOWN_MARKER]
            pos = end
        parts.append(text[pos:])
        return "".join(parts)


_EMPTY: Final = KnownSecrets()
_registry: list[KnownSecrets] = [_EMPTY]  # one slot, replaced whole: readers never lock


def register_secrets(values: Iterable[str]) -> None:
    """Hide `values` (and their derived forms) from now on wherever text is redacted.
    Callers on several threads serialize their calls."""
    _registry[0] = _registry[0].with_values(values)


def register_userinfo(user: str, password: str) -> None:
    """URL credentials: the password, and `user:password` as Basic auth sends it."""
    register_secrets([password, f"{user}:{password}"] if password else [])


def known_secrets() -> KnownSecrets:
    """The registry as it is now."""
    return _registry[0]


def known_spans(text: str) -> list[tuple[int, int]]:
    """Where registered secrets are in `text` (none registered: at once, empty)."""
    known = _registry[0]
    if known is _EMPTY:
        return []
    return known.spans(text)


def scrub_known(text: str) -> str:
    """`text` without any registered secret (`text` itself when nothing was found)."""
    known = _registry[0]
    if known is _EMPTY:
        return text
    return known.scrub(text)


def clear_known_secrets() -> None:
    """Forget every registered secret (tests; a process that holds none any more)."""
    _registry[0] = _EMPTY
