"""The redaction boundary every bundle payload crosses before it is encoded.

docs/internals.md "Redaction rules" (of "Debug bundles").
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import msgspec
from runjournal.domain.redaction import redact_obj, redact_text

encoder = msgspec.json.Encoder(order="sorted")
line_encoder = msgspec.json.Encoder()  # trace lines keep seq, time, kind, name, data order


def _plain(value: Any) -> Any:
    """JSON-safe builtins; anything exotic becomes its redacted repr, never raw bytes."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, Mapping):
        return {redact_text(str(_plain(k))): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_plain(v) for v in value), key=lambda v: encoder.encode(v))
    if isinstance(value, datetime):
        return value.isoformat()
    return redact_text(repr(value))


def redacted_json(payload: Any) -> Any:
    """The one way debug data is prepared for disk: `redact_obj`, then plain JSON data."""
    return _plain(redact_obj(payload))
