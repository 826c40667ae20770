"""Error text for users: one printable, bounded, redacted line."""

from __future__ import annotations

import unicodedata

from runjournal.domain.redaction.scanning import redact_text

# Annotations only (never evaluated): importing `typing` would cost start-up time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

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


def valid_utf8(text: str) -> str:
    """`text` with its lone surrogates escaped (`\\xNN`/`\\uNNNN`), so it encodes as UTF-8.

    A module can return any `str`; the journal and every JSON document need valid UTF-8
    (docs/operations.md "Hardening guarantees"). Everything else is left as it is.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join(_escape_char(ch) if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in text)
    return text


def safe_error_text(text: str, limit: int = 500) -> str:
    """One printable line for users: redacted, escaped, valid UTF-8, at most `limit` bytes.

    Control characters (newlines, tabs, ESC of ANSI sequences), bidi overrides and
    isolates, other Cc/Cf characters and lone surrogates become `\\xNN`/`\\uNNNN`.
    When cut, the cut is on a character boundary and `…` is appended within `limit`.
    """
    redacted = redact_text(text)
    budget = max(limit, 0)
    if len(redacted) <= budget and redacted.isascii() and redacted.isprintable():
        # every character is 0x20-0x7E (none escaped, one byte each) and all of it fits:
        # the loop below would return it unchanged (a reused lane's warnings, issue 29)
        return redacted
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
