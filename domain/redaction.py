"""The one redaction component shared by the journal, debug data and error text.

Two layers (HARDENING "Redaction"): secret-classified *keys* hide their whole value,
and credential-*shaped* substrings are replaced anywhere in text. There is no entropy
gate: shapes are matched by prefix and structure, and over-redaction is accepted.
Pure: regexes only, no I/O.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from typing import Final

import msgspec

__all__ = [
    "SECRET_MARKER",
    "SHAPE_NAMES",
    "find_secrets",
    "is_credential_shaped",
    "is_secret_key",
    "redact_argv",
    "redact_obj",
    "redact_text",
    "redact_value",
    "safe_error_text",
]

SECRET_MARKER: Final = "[REDACTED]"
"""Replaces a secret-keyed value; identity computations hash this instead of the value."""

# --------------------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------------------

_SECRET_NAMES: Final = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "pass",
        "passphrase",
        "secret",
        "token",
        "apikey",
        "api_key",
        "auth",
        "authorization",
        "cookie",
        "session",
        "credential",
        "credentials",
        "private_key",
        "privatekey",
        "access_key",
        "accesskey",
        "client_secret",
        "clientsecret",
        "dsn",
    }
)
# Substrings that make a single segment secret on their own (`dbpassword`, `xapitoken`).
_CONTAINED: Final = ("password", "passwd", "secret", "token", "apikey", "credential")
# Segments that contain `token` but mean LLM token counts or tokenizers, not credentials.
_BENIGN_SEGMENTS: Final = frozenset(
    {
        "tokens",
        "tokenize",
        "tokenized",
        "tokenizer",
        "tokenizers",
        "tokenizing",
        "tokenization",
    }
)
# Segments before a final `key` that name lookup keys, not credentials (`cache_key`).
_BENIGN_KEY_PREFIXES: Final = frozenset(
    {
        "artifact",
        "cache",
        "chunk",
        "composite",
        "dedup",
        "dedupe",
        "dict",
        "event",
        "foreign",
        "group",
        "hash",
        "idempotency",
        "index",
        "lane",
        "lookup",
        "map",
        "natural",
        "object",
        "partition",
        "primary",
        "public",
        "routing",
        "row",
        "run",
        "shard",
        "sort",
        "stage",
        "step",
        "stream",
        "unique",
    }
)
_SEGMENT_RE: Final = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def _segments(key: str) -> list[str]:
    return [s.lower() for s in _SEGMENT_RE.findall(key)]


def _segments_are_secret(segs: list[str]) -> bool:
    for i, seg in enumerate(segs):
        if seg in _SECRET_NAMES:
            return True
        if i + 1 < len(segs):
            nxt = segs[i + 1]
            if f"{seg}_{nxt}" in _SECRET_NAMES or f"{seg}{nxt}" in _SECRET_NAMES:
                return True
        if seg not in _BENIGN_SEGMENTS and any(word in seg for word in _CONTAINED):
            return True
    return False


@functools.lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    """Whether a value stored under `key` must be hidden entirely (SEMANTICS §8).

    Segments come from splitting on non-alphanumerics and case changes; a segment, an
    adjacent pair joined with `_` or nothing, or a segment containing a strong word
    (`dbpassword`) makes the key secret. `max_tokens`, `author`, `passages` are not.
    """
    return _segments_are_secret(_segments(key))


@functools.lru_cache(maxsize=4096)
def _is_secret_assignment_key(ident: str) -> bool:
    """Looser rule for `name = value` in free text: also any `..._key` naming a key."""
    segs = _segments(ident)
    if not segs:
        return False
    if _segments_are_secret(segs):
        return True
    if segs[-1] == "key":
        return len(segs) == 1 or segs[-2] not in _BENIGN_KEY_PREFIXES
    return False


# --------------------------------------------------------------------------------------
# Shapes
# --------------------------------------------------------------------------------------

# A value never starts with a marker, so redacted text does not match again. Shapes
# marked `folded` run over the lowercase view of the text, hence the second spelling.
_NOT_MARKER = r"(?!\[REDACTED)"
_NOT_MARKER_FOLDED = r"(?!\[redacted)"
_VALUE_GROUPS: Final = ("v", "w", "v1", "v2", "v3", "v4")


class _View:
    """Lazily derived forms of one text, shared by all shapes during one scan."""

    __slots__ = ("_lowered", "_reversed_lowered", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._lowered: str | None = None
        self._reversed_lowered: str | None = None

    @property
    def lowered(self) -> str:
        """Lowercase text whose indexes line up with `text` (for case-blind shapes)."""
        if self._lowered is None:
            low = self.text.lower()
            if len(low) != len(self.text):  # some character lowercases to several
                low = "".join(c.lower() if len(c.lower()) == 1 else c for c in self.text)
            self._lowered = low
        return self._lowered

    @property
    def reversed_lowered(self) -> str:
        if self._reversed_lowered is None:
            self._reversed_lowered = self.lowered[::-1]
        return self._reversed_lowered


@dataclasses.dataclass(frozen=True, slots=True)
class _Shape:
    """One credential shape.

    `needles` (in the text) or `folded_needles` (in its lowercase view): at least one
    occurs wherever the shape matches; they select candidate shapes for short texts.
    Long texts skip that step: each regex starts with a literal, which `re` scans for
    at memchr-like speed, and `gate` substrings guard the few regexes that do not.
    A regex's `v`/`w`/`v1`..`v4` group (or the whole match) is the secret span;
    `finder` replaces the regex where the shape needs context around an anchor.
    """

    name: str
    regex: re.Pattern[str] | None
    needles: tuple[str, ...] = ()
    folded_needles: tuple[str, ...] = ()
    folded: bool = False
    gate: tuple[str, ...] = ()
    finder: Callable[[_View], Iterator[tuple[int, int]]] | None = None
    groups: tuple[str, ...] = ()

    def spans(self, view: _View) -> Iterator[tuple[int, int]]:
        if self.finder is not None:
            yield from self.finder(view)
            return
        assert self.regex is not None
        hay = view.lowered if self.folded else view.text
        if self.gate and not any(map(hay.__contains__, self.gate)):
            return
        for m in self.regex.finditer(hay):
            # Value groups are alternatives and close last, so `lastgroup` names the one.
            start, end = m.span(m.lastgroup) if self.groups else m.span()
            if end > start:
                yield start, end


def _rx(
    name: str,
    pattern: str,
    needles: Iterable[str],
    *,
    folded: bool = False,
    gate: Iterable[str] = (),
) -> _Shape:
    regex = re.compile(pattern)
    return _Shape(
        name,
        regex,
        needles=() if folded else tuple(needles),
        folded_needles=tuple(needles) if folded else (),
        folded=folded,
        gate=tuple(gate),
        groups=tuple(g for g in _VALUE_GROUPS if g in regex.groupindex),
    )


# --- PEM private key blocks, through the END line --------------------------------------

_PEM_HEAD: Final = re.compile(r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----")
_PEM_TAIL: Final = re.compile(r"-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----")
# Without an END line (truncated text) the block runs while it looks like base64, PEM
# headers, whitespace (CRLF too) or `\n` escapes.
_PEM_BODY: Final = re.compile(r"(?:[A-Za-z0-9+/=:,.\- \t\r\n]|\\[rnt/])*")


def _pem_spans(view: _View) -> Iterator[tuple[int, int]]:
    """Linear even with many BEGIN lines: each END search and body run is done once."""
    text = view.text
    covered = 0
    tails_exhausted = False
    for head in _PEM_HEAD.finditer(text):
        if head.start() < covered:
            continue
        tail = None if tails_exhausted else _PEM_TAIL.search(text, head.end())
        if tail is None:
            tails_exhausted = True
            body = _PEM_BODY.match(text, head.end())
            covered = body.end() if body is not None else head.end()
        else:
            covered = tail.end()
        yield head.start(), covered


# One `name=value` (or bare attribute) of a Cookie / Set-Cookie header.
_COOKIE_PAIR = r"[^\s;=\"'\\]+(?:=[^\s;\"'\\]*)?"
_SCHEMES = r"(?:bearer|basic|token|apikey|digest|negotiate)"
# `Digest k="v", k2=v2, ...` (quotes possibly JSON-escaped), read from the lowercase view.
_DIGEST_PARAMS = (
    r"(?:[a-z0-9_-]+=(?:\"[^\"\r\n]*\"|\\\"[^\"\\\r\n]*\\\"|[^\s,\"'\\]+)(?:,[ \t]*)?)+"
)


# --- JWT: `eyJ<header>.eyJ<payload>.<signature>`, even glued to what precedes it -------

# From the `.eyJ` that starts the payload: the header is the base64url run before that
# dot, from its first `eyJ`. Runs before distinct dots are disjoint, so the scan stays
# linear even on `eyJeyJeyJ...` (a regex without a left boundary would not).
_JWT_REST: Final = re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_=-]*")
_B64URL_CHARS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_JWT_MIN_HEAD: Final = 11  # `eyJ` and at least 8 more characters before the dot


def _jwt_spans(view: _View) -> Iterator[tuple[int, int]]:
    text = view.text
    covered = 0
    dot = text.find(".eyJ")
    while dot != -1:
        rest = _JWT_REST.match(text, dot + 1) if dot >= covered else None
        if rest is not None:
            start = dot
            while start > covered and text[start - 1] in _B64URL_CHARS:
                start -= 1
            last = dot - _JWT_MIN_HEAD  # the last index where the header may start
            head = text.find("eyJ", start, last + 3) if last >= start else -1
            if head != -1:
                covered = rest.end()
                yield head, covered
        dot = text.find(".eyJ", dot + 1)


# --- AWS secret access key: 40 base64 characters shortly after `aws` or `secret` ------

_AWS_WORDS: Final = ("aws", "secret")
_AWS_SECRET_VALUE: Final = re.compile(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}")
_AWS_CHARS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/+")
_AWS_GAP: Final = 40


def _aws_secret_spans(view: _View) -> Iterator[tuple[int, int]]:
    text, low = view.text, view.lowered
    for word in _AWS_WORDS:
        i = low.find(word)
        while i != -1:
            after = i + len(word)
            for m in _AWS_SECRET_VALUE.finditer(text, after, after + _AWS_GAP + 40):
                gap = text[after : m.start()]
                if "\n" in gap or "\r" in gap:
                    break
                if m.end() == len(text) or text[m.end()] not in _AWS_CHARS:
                    yield m.span()
                    break
            i = low.find(word, i + 1)


# --- generic `name = value` / `name: value` with a secret-looking name ----------------

# Every name `_is_secret_assignment_key` accepts contains one of these (lowercased).
_GENERIC_WORDS: Final = (
    "key",
    "tok",
    "secret",
    "pass",
    "pwd",
    "auth",
    "cookie",
    "session",
    "credential",
    "dsn",
)
# Scans the reversed lowercase text: a separator, optional spaces and (escaped) closing
# quote, then a name holding one of the words, all read backwards. One pattern per
# separator so each starts with a literal, which `re` finds much faster than a class.
_REVERSED_NAME = (
    r"[ \t]*(?:[\"']\\?)?(?=[a-z0-9_.-]*?(?:"
    + "|".join(w[::-1] for w in _GENERIC_WORDS)
    + r"))(?P<k>[a-z0-9][a-z0-9_.-]*)"
)
_REVERSED_ASSIGNMENTS: Final = (re.compile(":" + _REVERSED_NAME), re.compile("=" + _REVERSED_NAME))
# A quoted string (plain, or with JSON-escaped quotes) or one bare token, optionally
# after an HTTP auth scheme word (`token: Bearer x`).
_ASSIGNED_VALUE: Final = re.compile(
    r"[ \t]*(?:\\\"(?P<v1>" + _NOT_MARKER + r"[^\"\\\r\n]+)"
    r"|\"(?P<v2>" + _NOT_MARKER + r"(?:[^\"\\\r\n]|\\.)+)\""
    r"|'(?P<v3>" + _NOT_MARKER + r"[^'\r\n]+)'"
    r"|(?:(?i:" + _SCHEMES + r")[ \t]+|(?!(?i:" + _SCHEMES + r")[ \t]))"
    r"(?P<v4>" + _NOT_MARKER + r"[^\s\"'`,;&<>{}()\[\]\\]+))"
)


def _generic_spans(view: _View) -> Iterator[tuple[int, int]]:
    """Values of secret-named assignments, in text order.

    A separator inside a value already yielded is skipped, which keeps the scan linear
    on inputs like `password=password=...`.
    """
    text, n = view.text, len(view.text)
    if not any(map(view.lowered.__contains__, _GENERIC_WORDS)):
        return
    hits = [
        (n - 1 - m.start(), n - m.end("k"), n - m.start("k"))  # separator, name span
        for rx in _REVERSED_ASSIGNMENTS
        for m in rx.finditer(view.reversed_lowered)
    ]
    hits.sort()
    covered = 0
    for pos, name_start, name_end in hits:
        if pos < covered:
            continue
        nxt = text[pos + 1 : pos + 2]
        if text[pos] == "=":
            if nxt == "=":  # a comparison, not an assignment
                continue
            end = pos + 2 if nxt == ">" else pos + 1
        else:
            end = pos + 2 if nxt == "=" else pos + 1
        if not _is_secret_assignment_key(text[name_start:name_end]):
            continue
        value_m = _ASSIGNED_VALUE.match(text, end)
        if value_m is not None:
            start, covered = value_m.span(value_m.lastgroup)
            yield start, covered


# Order is priority: overlapping spans are merged and named after the earliest shape
# here, so the specific shapes win over the context-based ones at the end.
_SHAPES: Final[tuple[_Shape, ...]] = (
    _Shape("private_key", None, needles=("PRIVATE KEY",), finder=_pem_spans),
    _Shape("jwt", None, needles=("eyJ",), finder=_jwt_spans),
    _rx(
        "aws_access_key_id",
        r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])(?<![A-Z]....)[A-Z0-9]{16,}",
        ["AKIA", "ASIA", "ABIA", "ACCA", "A3T"],
    ),
    _rx("github_pat", r"github_pat_[A-Za-z0-9_]{22,}", ["github_pat_"]),
    _rx(
        "github_token",
        # Lazy up to the next token's prefix, so two tokens glued together are both caught.
        r"gh[pousr]_[A-Za-z0-9]{36,}?(?=gh[pousr]_|[^A-Za-z0-9]|\Z)",
        ["ghp_", "gho_", "ghu_", "ghs_", "ghr_"],
    ),
    _rx("anthropic_api_key", r"sk-ant-[a-z]+[0-9]{2}-[A-Za-z0-9_-]{16,}", ["sk-ant-"]),
    _rx(
        "openai_api_key",
        r"sk-(?!ant-)(?:(?<![A-Za-z0-9]...)(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{20,}"
        r"|(?:proj-|svcacct-|admin-|None-)[A-Za-z0-9_-]{40,}|[A-Za-z0-9]{32,}[A-Za-z0-9_-]*)",
        ["sk-"],
    ),
    _rx(
        "stripe_key",
        r"(?:[sr]k_(?:live|test)_[A-Za-z0-9]{10,}|whsec_[A-Za-z0-9]{20,})",
        ["k_live_", "k_test_", "whsec_"],
        gate=["k_live_", "k_test_", "whsec_"],
    ),
    _rx(
        "slack_webhook",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<v>[A-Za-z0-9+/_-]{20,})",
        ["hooks.slack.com/"],
    ),
    _rx(
        "slack_token",
        r"x(?:ox[abposr]-[A-Za-z0-9-]{11,}|app-[0-9]-[A-Za-z0-9-]{10,})",
        ["xox", "xapp-"],
    ),
    _rx("google_api_key", r"AIza[0-9A-Za-z_-]{35}", ["AIza"]),
    _rx(
        "gitlab_token",
        r"gl(?:pat|dt|rt|ptt|cbt|soat|ffct|imt|agent)-[A-Za-z0-9_-]{20,}",
        [f"gl{k}-" for k in ("pat", "dt", "rt", "ptt", "cbt", "soat", "ffct", "imt", "agent")],
    ),
    _rx(
        "huggingface_token",
        r"(?:hf_|api_org_)[A-Za-z0-9]{30,}",
        ["hf_", "api_org_"],
        gate=["hf_", "api_org_"],
    ),
    _rx("npm_token", r"npm_[A-Za-z0-9]{36,}", ["npm_"]),
    _rx(
        "pypi_token",
        r"pypi-(?:AgEIcHlwaS5vcmc|AgENdGVzdC5weXBpLm9yZw)[A-Za-z0-9_-]{16,}",
        ["pypi-Ag"],
    ),
    _rx("twilio_api_key", r"SK(?<![A-Za-z0-9]..)[0-9a-fA-F]{32}(?![A-Za-z0-9])", ["SK"]),
    _rx("sendgrid_api_key", r"SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}", ["SG."]),
    _rx("digitalocean_token", r"do[opr]_v1_[a-f0-9]{64}", ["_v1_"], gate=["_v1_"]),
    _rx("age_secret_key", r"AGE-SECRET-KEY-1[0-9A-Z]{50,}", ["AGE-SECRET-KEY-1"]),
    _Shape("aws_secret_access_key", None, folded_needles=_AWS_WORDS, finder=_aws_secret_spans),
    _rx(
        "url_password",
        r"://[^\s:/?#@\[\]\"'<>]*:(?P<v>" + _NOT_MARKER + r"[^\s/?#\"'<>]+)@",
        ["://"],
    ),
    _rx(
        "authorization",
        r"authorization\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?"
        r"(?:digest[ \t]+(?P<v>" + _DIGEST_PARAMS + r")"
        r"|(?:" + _SCHEMES + r"[ \t]+|(?!" + _SCHEMES + r"[ \t]))"
        r"(?P<w>" + _NOT_MARKER_FOLDED + r"[^\s\"'\\,;&<>]+))",
        ["authorization"],
        folded=True,
    ),
    _rx(
        "bearer_token",
        r"bearer[ \t]+(?P<v>" + _NOT_MARKER_FOLDED + r"(?:(?=[a-z]*[0-9._~+/=-])"
        r"[a-z0-9._~+/=-]{8,}|[a-z0-9._~+/=-]{20,}))",
        ["bearer"],
        folded=True,
    ),
    _rx(
        "cookie_header",
        r"cookie[ \t]*:[ \t]*(?P<v>"
        + _NOT_MARKER_FOLDED
        + _COOKIE_PAIR
        + r"(?:;[ \t]*"
        + _COOKIE_PAIR
        + r")*)",
        ["cookie"],
        folded=True,
    ),
    _Shape("generic_secret", None, folded_needles=_GENERIC_WORDS, finder=_generic_spans),
)

SHAPE_NAMES: Final = tuple(s.name for s in _SHAPES)
"""Every shape name that can appear in `[REDACTED:<shape>]`, in priority order."""


def _needle_index(
    needles_of: Callable[[_Shape], tuple[str, ...]],
) -> tuple[re.Pattern[str], dict[str, frozenset[int]]]:
    """One alternation over all needles, and the candidate shapes each hit implies.

    `findall` does not report a needle hidden inside an earlier, overlapping hit, so
    a hit also selects the shapes of every needle that could overlap it.
    """
    owners: dict[str, set[int]] = {}
    for i, shape in enumerate(_SHAPES):
        for needle in needles_of(shape):
            owners.setdefault(needle, set()).add(i)

    def overlaps(a: str, b: str) -> bool:
        return b in a or any(a.endswith(b[:k]) for k in range(1, min(len(a), len(b))))

    implied = {
        a: frozenset(i for b, shapes in owners.items() if a == b or overlaps(a, b) for i in shapes)
        for a in owners
    }
    return re.compile(_trie_pattern(list(owners))), implied


def _trie_pattern(words: list[str]) -> str:
    """An alternation factored by common prefixes, so `re` tries one branch per position.

    Optional tails are greedy: at any position the longest needle wins.
    """
    if "" in words:
        rest = [w for w in words if w]
        return f"(?:{_trie_pattern(rest)})?" if rest else ""
    by_first: dict[str, list[str]] = {}
    for word in words:
        by_first.setdefault(word[0], []).append(word[1:])
    alts = [re.escape(c) + _trie_pattern(tails) for c, tails in sorted(by_first.items())]
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


_CASE_NEEDLES, _CASE_IMPLIED = _needle_index(lambda s: s.needles)
_FOLDED_NEEDLES, _FOLDED_IMPLIED = _needle_index(lambda s: s.folded_needles)
_ALL_SHAPES: Final = tuple(range(len(_SHAPES)))
# Below this length one regex pass picks the candidate shapes; above it, running every
# shape's own literal-prefixed scan is cheaper than the alternation.
_SHORT: Final = 2048
# Every shape that needs no `:` or `=` matches at least this many characters (the
# shortest is `bearer ` with an 8-character token), so shorter texts without a
# separator are plain.
_MIN_SEPARATORLESS: Final = 15
_MAX_PASSES: Final = 8


def _candidate_shapes(view: _View) -> Iterable[int]:
    if len(view.text) >= _SHORT:
        return _ALL_SHAPES
    return _candidate_shapes_short(view)


def _candidate_shapes_short(view: _View) -> list[int]:
    chosen: set[int] = set()
    for hit in _CASE_NEEDLES.findall(view.text):
        chosen |= _CASE_IMPLIED[hit]
    for hit in _FOLDED_NEEDLES.findall(view.lowered):
        chosen |= _FOLDED_IMPLIED[hit]
    return sorted(chosen)


def find_secrets(text: str) -> list[tuple[int, int, str]]:
    """Credential-shaped spans `(start, end, shape)`, sorted and non-overlapping.

    Every shape is searched independently; overlapping spans are merged and take the
    name of the highest-priority shape among them, so the result is deterministic.
    """
    if len(text) < _MIN_SEPARATORLESS and ":" not in text and "=" not in text:
        return []
    view = _View(text)
    found = [
        (start, end, prio)
        for prio in _candidate_shapes(view)
        for start, end in _SHAPES[prio].spans(view)
    ]
    if not found:
        return []
    found.sort()
    merged: list[list[int]] = []
    for start, end, prio in found:
        if merged and start < merged[-1][1]:
            last = merged[-1]
            last[1] = max(last[1], end)
            last[2] = min(last[2], prio)
        else:
            merged.append([start, end, prio])
    return [(s, e, _SHAPES[p].name) for s, e, p in merged]


def _replace_spans(text: str, spans: list[tuple[int, int, str]]) -> str:
    parts: list[str] = []
    pos = 0
    for start, end, name in spans:
        parts.append(text[pos:start])
        parts.append(f"[REDACTED:{name}]")
        pos = end
    parts.append(text[pos:])
    return "".join(parts)


def redact_text(text: str) -> str:
    """Replace every credential-shaped substring with `[REDACTED:<shape>]`.

    Repeats until nothing matches, so the result is a fixed point and redacting it
    again is a no-op. Returns `text` itself when nothing was found.
    """
    current = text
    for _ in range(_MAX_PASSES):
        spans = find_secrets(current)
        if not spans:
            return current
        current = _replace_spans(current, spans)
    # Pathological input that keeps producing new matches: hide all of it.
    return "[REDACTED:unbounded]"


def is_credential_shaped(value: str) -> bool:
    """Whether `value` holds any credential-shaped substring (enters identity as a marker)."""
    return bool(find_secrets(value))


# --------------------------------------------------------------------------------------
# Structured data
# --------------------------------------------------------------------------------------


def _as_text(value: bytes | bytearray | memoryview) -> str:
    return bytes(value).decode("utf-8", "surrogateescape")


def redact_value(key: str | None, value: object) -> object:
    """Redact `value` as stored under `key`: a secret key hides it whole, else recurse."""
    if key is not None and is_secret_key(key):
        return SECRET_MARKER
    return redact_obj(value)


def redact_obj(obj: object) -> object:
    """A redacted copy of plain data (dict, list, tuple, set, str, bytes, Structs).

    Never mutates `obj`. Bytes become text decoded with `surrogateescape`; msgspec
    Structs and dataclass instances become dicts of their fields.
    """
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, bytes | bytearray | memoryview):
        return redact_text(_as_text(obj))
    if isinstance(obj, dict):
        out: dict[object, object] = {}
        for key, value in obj.items():
            if isinstance(key, bytes | bytearray | memoryview):
                key = _as_text(key)
            if isinstance(key, str):
                out[redact_text(key)] = redact_value(key, value)
            else:
                out[key] = redact_obj(value)
        return out
    if isinstance(obj, list):
        return [redact_obj(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(redact_obj(v) for v in obj)
    if isinstance(obj, set | frozenset):
        return type(obj)(redact_obj(v) for v in obj)
    if isinstance(obj, msgspec.Struct):
        return redact_obj(msgspec.structs.asdict(obj))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return redact_obj({f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)})
    return obj


# --------------------------------------------------------------------------------------
# Command lines
# --------------------------------------------------------------------------------------


def _redact_assignment(pair: str) -> str:
    key, sep, _ = pair.partition("=")
    if sep and is_secret_key(key):
        return f"{key}={SECRET_MARKER}"
    return pair


def _is_option(arg: str) -> bool:
    return arg.startswith("-") and len(arg) > 1


def redact_argv(argv: list[str]) -> list[str]:
    """A redacted copy of a command line, fit for the journal and debug summaries.

    `--set KEY=VALUE` hides VALUE for a secret KEY; an option whose name is secret
    (`--api-key X`, `--token=X`) hides its value; every argument is also text-redacted.
    """
    out: list[str] = []
    i = 0
    options_done = False
    while i < len(argv):
        arg = argv[i]
        i += 1
        if options_done or not _is_option(arg):
            out.append(redact_text(arg))
            continue
        if arg == "--":
            options_done = True
            out.append(arg)
            continue
        name, eq, value = arg.partition("=")
        if name == "--set":
            if eq:
                out.append(redact_text(f"{name}={_redact_assignment(value)}"))
            else:
                out.append(arg)
                if i < len(argv):
                    out.append(redact_text(_redact_assignment(argv[i])))
                    i += 1
        elif is_secret_key(name):
            if eq:
                out.append(f"{redact_text(name)}={SECRET_MARKER}")
            else:
                out.append(redact_text(arg))
                if i < len(argv) and not _is_option(argv[i]):
                    out.append(SECRET_MARKER)
                    i += 1
        else:
            out.append(redact_text(arg))
    return out


# --------------------------------------------------------------------------------------
# Error text for users
# --------------------------------------------------------------------------------------

_BIDI: Final = frozenset(range(0x202A, 0x202F)) | frozenset(range(0x2066, 0x206A))
_ELLIPSIS: Final = "…"
_ELLIPSIS_BYTES: Final = len(_ELLIPSIS.encode())


def _escape_char(ch: str) -> str:
    cp = ord(ch)
    if 0xDC80 <= cp <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{cp - 0xDC00:02x}"
    if cp < 0x100:
        return f"\\x{cp:02x}"
    if cp <= 0xFFFF:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


def _needs_escape(ch: str) -> bool:
    cp = ord(ch)
    if 0x20 <= cp < 0x7F:
        return False
    if cp < 0x20 or cp == 0x7F or cp in _BIDI:
        return True
    return unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")


def safe_error_text(text: str, limit: int = 500) -> str:
    """One printable line for users: redacted, escaped, valid UTF-8, at most `limit` bytes.

    Control characters (newlines, tabs, ESC of ANSI sequences), bidi overrides and
    isolates, other Cc/Cf characters and lone surrogates become `\\xNN`/`\\uNNNN`.
    When cut, the cut is on a character boundary and `…` is appended within `limit`.
    """
    redacted = redact_text(text)
    budget = max(limit, 0)
    pieces: list[str] = []
    used = 0
    cut_at: int | None = None  # length of `pieces` where `…` still fits
    for ch in redacted:
        piece = _escape_char(ch) if _needs_escape(ch) else ch
        size = len(piece.encode("utf-8"))
        if used + _ELLIPSIS_BYTES <= budget:
            cut_at = len(pieces)
        if used + size > budget:
            if cut_at is None:
                return ""
            return "".join(pieces[:cut_at]) + _ELLIPSIS
        pieces.append(piece)
        used += size
    return "".join(pieces)
