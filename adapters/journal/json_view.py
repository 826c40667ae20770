"""The event view printed by `journal show --json` (docs/internals.md "JSON view").

No storage ids: the same run prints byte-identically from SQLite, from PostgreSQL or
after an import.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Final

import msgspec
from runjournal.domain.events import RunEvent

__all__ = ["journal_event_to_json"]

_ENVELOPE: Final = frozenset({"originator_id", "originator_version", "timestamp"})


def _iso_utc(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


# Most fields are plain strings and numbers: returned as they are, before any isinstance
# check (an abc check per field dominated `journal show` before; docs/performance.md).
_SCALARS: Final = frozenset({str, int, float, bool, type(None)})


def _plain(value: Any) -> Any:
    """Builtins with sorted keys; Structs (even array-like ones) become dicts."""
    if type(value) in _SCALARS:
        return value
    if isinstance(value, msgspec.Struct):
        return {f: _plain(getattr(value, f)) for f in sorted(value.__struct_fields__)}
    if type(value) is dict or isinstance(value, Mapping):
        items = [(_plain_key(k), _plain(v)) for k, v in value.items()]
        return dict(sorted(items, key=lambda kv: str(kv[0])))
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_plain(v) for v in value), key=lambda v: msgspec.json.encode(v))
    if isinstance(value, datetime):
        return _iso_utc(value)
    return msgspec.to_builtins(value)


def _plain_key(key: Any) -> Any:
    if isinstance(key, Enum):
        return key.value
    if isinstance(key, str | int | float | bool) or key is None:
        return key
    return str(msgspec.to_builtins(key))


def journal_event_to_json(event: RunEvent) -> dict[str, Any]:
    """`journal show --json` view of one event: no storage ids, so identical on any backend."""
    data = {
        name: _plain(getattr(event, name))
        for name in sorted(event.__struct_fields__)
        if name not in _ENVELOPE
    }
    return {
        "class_version": int(getattr(type(event), "class_version", 1)),
        "data": data,
        "timestamp": _iso_utc(event.timestamp),
        "type": type(event).__name__,
        "version": event.originator_version,
    }
