"""The one redaction component shared by the journal, debug data and error text.

Two layers (docs/internals.md "Redaction"): secret-classified *keys* hide their whole
value, and credential-*shaped* substrings are replaced anywhere in text (the list is
in docs/operations.md "Redaction"). There is no entropy gate, except for a bare
40-character AWS secret key; shapes are matched by prefix and structure, and
over-redaction is accepted. Pure: regexes only, no I/O, and none compiled at import.

- `known`: the secrets this process holds, hidden by value in all their forms;
- `keys`: which keys name secrets;
- `shapes`, `finders`: the credential shapes, in priority order;
- `scanning`: finding and replacing shaped spans in text;
- `redact_structured`: redacted copies of dicts, lists, Structs, dataclasses;
- `argv`: redacted command lines; `urls`: the one `redact_url`;
- `error_text`: one printable, bounded line for users.
"""

from __future__ import annotations

from runjournal.domain.redaction.argv import redact_argv
from runjournal.domain.redaction.error_text import safe_error_text, valid_utf8
from runjournal.domain.redaction.keys import is_secret_key
from runjournal.domain.redaction.known import (
    KNOWN_MARKER,
    clear_known_secrets,
    register_secrets,
    register_userinfo,
    scrub_known,
)
from runjournal.domain.redaction.redact_structured import SECRET_MARKER, redact_obj, redact_value
from runjournal.domain.redaction.scanning import find_secrets, is_credential_shaped, redact_text
from runjournal.domain.redaction.shapes import SHAPE_NAMES
from runjournal.domain.redaction.urls import redact_url

__all__ = [
    "KNOWN_MARKER",
    "SECRET_MARKER",
    "SHAPE_NAMES",
    "clear_known_secrets",
    "find_secrets",
    "is_credential_shaped",
    "is_secret_key",
    "redact_argv",
    "redact_obj",
    "redact_text",
    "redact_url",
    "redact_value",
    "register_secrets",
    "register_userinfo",
    "safe_error_text",
    "scrub_known",
    "valid_utf8",
]
