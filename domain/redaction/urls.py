"""The one way a URL is made safe to show: `config show`, the journal and error text.

One string is one URL here, so its userinfo is found structurally: the password runs
from the first `:` after `scheme://` to the last `@`, whatever it holds (`/`, `?`, `#`,
spaces, `@`). Everything else passes through the text shapes (query parameters such
as `password=` or `X-Amz-Signature=`, tokens in paths). docs/operations.md
"Redaction" lists what is hidden.
"""

from __future__ import annotations

from runjournal.domain.redaction.scanning import find_secrets, redact_text
from runjournal.domain.redaction.views import MARKER_PREFIX, lazy_regex

# Annotations only (never evaluated): importing `typing` would cost start-up time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

URL_PASSWORD_MARKER: Final = "[REDACTED:url_password]"
_NOT_USER: Final = frozenset("/?#[] \t\r\n")  # `@` may be in it: `bob@corp.com:pw@host`
_PORT_THEN_PATH: Final = lazy_regex(r"[0-9]{1,5}/")


def _password_span(url: str) -> tuple[int, int] | None:
    sep = url.find("://")
    if sep == -1:
        return None
    user_start = sep + 3
    at = url.rfind("@")
    colon = url.find(":", user_start, at) if at > user_start else -1
    if colon == -1 or colon + 1 >= at or any(c in _NOT_USER for c in url[user_start:colon]):
        return None
    if url.startswith(MARKER_PREFIX, colon + 1):
        return None
    # `host:5173/@vite/client`: a port, then a path that starts with `@`
    if url[at - 1] == "/" and _PORT_THEN_PATH().match(url, colon + 1):
        return None
    return colon + 1, at


def _masked(text: str, mask: str) -> str:
    parts: list[str] = []
    pos = 0
    for start, end, _ in find_secrets(text):
        parts += [text[pos:start], mask]
        pos = end
    parts.append(text[pos:])
    return "".join(parts)


def redact_url(url: str, *, mask: str | None = None) -> str:
    """`url` with its password and every credential-shaped part hidden.

    Hidden parts become `[REDACTED:<shape>]` (the password `[REDACTED:url_password]`),
    or `mask` for each of them when given (`config show` prints `***`). Text that is
    not a URL is redacted as text.
    """

    def piece(text: str) -> str:
        return redact_text(text) if mask is None else _masked(text, mask)

    span = _password_span(url)
    if span is None:
        return piece(url)
    start, end = span
    return piece(url[:start]) + (URL_PASSWORD_MARKER if mask is None else mask) + piece(url[end:])
