"""Canonical JSON for the files a run writes (manifest, report, failure, …)."""

from __future__ import annotations

from typing import Any

import msgspec

_json = msgspec.json.Encoder(order="sorted")


def json_bytes(doc: Any) -> bytes:
    """Canonical, human-readable JSON: sorted keys, two-space indent, a final newline."""
    return msgspec.json.format(_json.encode(doc), indent=2) + b"\n"
