"""Registering the secrets this process holds with the redactor, from any thread.

The composition root registers every LLM profile's key (the value of its `api_key_env`,
or `OPENAI_API_KEY`) and the credentials of its `base_url` once the profiles are
loaded; the LLM runtime registers them again when it resolves a profile. From then on
`redact_text` hides them by value in every form (docs/internals.md "Known secrets").
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

from runjournal.domain.redaction import register_secrets

_lock = threading.Lock()


def url_secrets(url: str | None) -> list[str]:
    """The password of `url`'s user-info, as written and decoded, and `user:password`
    decoded as Basic auth sends it; nothing when it has none."""
    if not url or "@" not in url:
        return []
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:  # a port that is not a number: no credentials to read
        return []
    if not password:
        return []
    plain_user, plain_password = unquote(user or ""), unquote(password)
    return [password, plain_password, f"{plain_user}:{plain_password}", f"{user}:{password}"]


def remember_secrets(values: Iterable[str | None]) -> None:
    """Hide `values` wherever text is redacted from now on (empty ones are skipped)."""
    chosen = [v for v in values if v]
    if not chosen:
        return
    with _lock:
        register_secrets(chosen)
