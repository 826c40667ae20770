"""Redacted copies of structured values: dicts, lists, Structs, dataclasses, bytes.

A value stored under a secret key is hidden whole (`SECRET_MARKER`); everything else
is recursed into and its strings pass through `redact_text`. msgspec and dataclasses
are only touched when such a value is met, so importing this module stays cheap.
"""

from __future__ import annotations

from runjournal.domain.redaction.keys import is_secret_key
from runjournal.domain.redaction.scanning import redact_text

# Annotations only (never evaluated): importing `typing` would cost start-up time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

SECRET_MARKER: Final = "[REDACTED]"
"""Replaces a secret-keyed value; identity computations hash this instead of the value."""


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
    cls = type(obj)
    if hasattr(cls, "__struct_fields__"):  # a msgspec Struct: msgspec is already loaded
        import msgspec

        if isinstance(obj, msgspec.Struct):
            return redact_obj(msgspec.structs.asdict(obj))
    if hasattr(cls, "__dataclass_fields__") and not isinstance(obj, type):
        import dataclasses

        if dataclasses.is_dataclass(obj):
            return redact_obj({f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)})
    return obj
