"""Which keys name secrets: a value stored under one is hidden whole.

The rule is documented in docs/internals.md "Redaction" ("Key rule"). Keys are folded
first (compatibility decomposition, accents dropped, `ß` -> `ss`), so `pässword`,
fullwidth letters and `contraseña` are classified like their ASCII spellings.
"""

from __future__ import annotations

import functools
import unicodedata

from runjournal.domain.redaction.views import lazy_regex

# Annotations only (never evaluated): importing `typing` would cost start-up time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

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
        # the word for password in other languages (accents folded away)
        "adgangskode",
        "contrasena",
        "contrasenya",
        "haslo",
        "kennwort",
        "losenord",
        "motdepasse",
        "passe",
        "passord",
        "passwort",
        "salasana",
        "senha",
        "wachtwoord",
    }
)
# Substrings that make a single segment secret on their own (`dbpassword`, `xapitoken`).
_CONTAINED: Final = (
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "credential",
    "passwort",
    "kennwort",
    "contrasena",
    "wachtwoord",
)
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
# Last segments of a command-line option that names where a secret is, not the secret
# (`--password-file PATH`, `--token-env NAME`, `--auth-type basic`).
_OPTION_POINTERS: Final = frozenset(
    {"dir", "env", "file", "method", "mode", "path", "prompt", "stdin", "type"}
)
_SEGMENT_RE: Final = lazy_regex(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
# Letters with no compatibility decomposition that still read as an ASCII letter
# (U+0131 is the dotless i).
_UNDECOMPOSED: Final = {"ł": "l", "Ł": "L", "ø": "o", "Ø": "O", "đ": "d", "Đ": "D", "\u0131": "i"}


def fold(key: str) -> str:
    """`key` with non-ASCII letters read as ASCII where they have an ASCII reading."""
    if key.isascii():
        return key
    out = []
    for ch in unicodedata.normalize("NFKD", key):
        if ch.isascii():
            out.append(ch)
        elif not unicodedata.combining(ch):
            ch = _UNDECOMPOSED.get(ch, ch)
            out.append(ch if ch.isascii() else ch.casefold())
    return "".join(out)


def _segments(key: str) -> list[str]:
    return [s.lower() for s in _SEGMENT_RE().findall(fold(key))]


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
    """Whether a value stored under `key` must be hidden entirely.

    Segments come from splitting on non-alphanumerics and case changes; a segment, an
    adjacent pair joined with `_` or nothing, or a segment containing a strong word
    (`dbpassword`) makes the key secret. `max_tokens`, `author`, `passages` are not.
    """
    return _segments_are_secret(_segments(key))


@functools.lru_cache(maxsize=4096)
def is_secret_assignment_key(ident: str) -> bool:
    """Looser rule for `name = value` in free text: also any `..._key` naming a key."""
    segs = _segments(ident)
    if not segs:
        return False
    if _segments_are_secret(segs):
        return True
    if segs[-1] == "key":
        return len(segs) == 1 or segs[-2] not in _BENIGN_KEY_PREFIXES
    return False


@functools.lru_cache(maxsize=1024)
def is_secret_option(name: str) -> bool:
    """Whether a command-line option in free text (`--password X`) carries a secret."""
    segs = _segments(name)
    return bool(segs) and segs[-1] not in _OPTION_POINTERS and _segments_are_secret(segs)
